package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func psCommand() *cli.Command {
	return &cli.Command{
		Name:      "ps",
		Usage:     "list a sandbox's detached processes (`exec -d`)",
		ArgsUsage: "SANDBOX",
		Description: "Prints one line per detached process, oldest first: its ID (for `output`, `stdin`, `kill`),\n" +
			"guest PID, state (running, exited, lost), exit code once exited, and command.",
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 1, "agentbox ps SANDBOX")
			if err != nil {
				return err
			}
			procs, err := cl.ListProcesses(ctx, args[0])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tPID\tSTATE\tEXIT\tCMD")
			for _, p := range procs {
				exit := "-"
				if p.Exit != nil {
					exit = strconv.Itoa(p.Exit.ExitCode)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", p.ID, p.Pid, p.State, exit, shellJoin(p.Cmd))
			}
			return tw.Flush()
		}),
	}
}

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
