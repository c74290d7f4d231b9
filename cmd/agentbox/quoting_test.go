package main

import (
	"testing"
)

func TestQuoteWord(t *testing.T) {
	for in, want := range map[string]string{
		"":               "''",
		"plain":          "plain",
		"/a/b-c_d.e:f":   "/a/b-c_d.e:f",
		"a=b,c@d%e+f":    "a=b,c@d%e+f",
		"two words":      "'two words'",
		"it's":           `'it'\''s'`,
		"$HOME":          "'$HOME'",
		"~":              "'~'",
		"héllo":          "'héllo'",
		"a\nb":           `$'a\nb'`,
		"tab\there":      `$'tab\there'`,
		"\x1b[31m":       `$'\x1b[31m'`,
		"bad\xffbyte":    `$'bad\xffbyte'`,
		"q'\\\x00":       `$'q\'\\\x00'`,
		"bidi\u202eevil": `$'bidi\u202eevil'`,
	} {
		if got := quoteWord(in); got != want {
			t.Errorf("quoteWord(%q) = %s, want %s", in, got, want)
		}
	}
}
