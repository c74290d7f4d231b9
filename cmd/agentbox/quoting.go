package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// shellJoin renders argv as one line a shell would split back into argv,
// each argument quoted by quoteWord (control characters ANSI-C quoted,
// $'a\nb' as bash's printf %q does, so the line stays one line and never
// drives the terminal).
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = quoteWord(a)
	}
	return strings.Join(parts, " ")
}

// quoteWord quotes s for a POSIX shell only when needed: bare if it is
// made of safe characters, in single quotes if it is printable, else in
// bash's $'…' with escapes (so control characters never reach the
// terminal).
func quoteWord(s string) string {
	if s == "" {
		return "''"
	}
	safe, printable := true, utf8.ValidString(s)
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./-_", r)) {
			safe = false
		}
		if !unicode.IsPrint(r) && r != ' ' {
			printable = false
		}
	}
	switch {
	case safe:
		return s
	case printable:
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\'' || r == '\\':
			b.WriteString(`\` + string(r))
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x80 && !unicode.IsPrint(r) && r != ' ':
			fmt.Fprintf(&b, `\x%02x`, r)
		case !unicode.IsPrint(r) && r != ' ':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteString("'")
	return b.String()
}
