package profile

import (
	"fmt"
	"os"
	"strings"
)

// NixArgsEnv names the environment variable whose value is split like a
// shell command line (SplitArgs) into extra arguments for every nix
// command agentbox runs, e.g.
// `--option substituters ” --option build-users-group ”` on an offline
// machine without the nixbld group.
const NixArgsEnv = "AGENTBOX_NIX_ARGS"

// NixArgsFromEnv returns the arguments of $AGENTBOX_NIX_ARGS split by
// SplitArgs (none when it is unset or blank).
func NixArgsFromEnv() ([]string, error) {
	args, err := SplitArgs(os.Getenv(NixArgsEnv))
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", NixArgsEnv, err)
	}
	return args, nil
}

// SplitArgs splits s into words the way a POSIX shell does, without any
// expansion: blanks separate words; 'single quotes' keep everything
// literally; "double quotes" keep everything but a backslash before
// `"`, `\`, `$` or a backquote; a backslash outside quotes keeps the next
// character. An empty pair of quotes (” or "") is an empty word. An unclosed
// quote or a trailing backslash is an error.
func SplitArgs(s string) ([]string, error) {
	var (
		words  []string
		cur    strings.Builder
		inWord bool
	)
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == ' ' || ch == '\t' || ch == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case ch == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case ch == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			inWord = true
		case ch == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("trailing backslash in %q", s)
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
