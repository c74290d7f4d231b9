package main

import (
	"fmt"
	"strings"
	"unicode"
)

// shellJoin renders argv as one line a shell would split back into argv:
// arguments with spaces or shell characters are single-quoted, those with
// control characters (newlines...) ANSI-C quoted ($'a\nb', as bash's
// printf %q does), so the line stays one line.
func shellJoin(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		switch {
		case a != "" && !strings.ContainsFunc(a, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
		}):
			parts[i] = a
		case strings.ContainsFunc(a, unicode.IsControl):
			var b strings.Builder
			b.WriteString("$'")
			for _, r := range a {
				switch {
				case r == '\\' || r == '\'':
					b.WriteString(`\` + string(r))
				case r == '\n':
					b.WriteString(`\n`)
				case r == '\t':
					b.WriteString(`\t`)
				case r < 0x20 || r == 0x7f:
					fmt.Fprintf(&b, `\x%02x`, r)
				case unicode.IsControl(r):
					fmt.Fprintf(&b, `\u%04x`, r)
				default:
					b.WriteRune(r)
				}
			}
			b.WriteString("'")
			parts[i] = b.String()
		default:
			parts[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(parts, " ")
}
