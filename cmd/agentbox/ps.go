package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func psCommand() *cli.Command {
	return &cli.Command{
		Name:      "ps",
		Usage:     "list a sandbox's detached processes (`exec -d`)",
		ArgsUsage: "SANDBOX",
		Description: "Prints one line per detached process, oldest first: its ID (for `output`, `stdin`, `kill`),\n" +
			"guest PID, state (running, exited, lost), exit code once exited, its terminal's size (ROWSxCOLS, `-`\n" +
			"without one: `attach -it` those) and command.",
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
			fmt.Fprintln(tw, "ID\tPID\tSTATE\tEXIT\tTTY\tCMD")
			for _, p := range procs {
				exit := "-"
				if p.Exit != nil {
					exit = strconv.Itoa(p.Exit.ExitCode)
				}
				tty := "-"
				if p.Tty != nil {
					tty = fmt.Sprintf("%dx%d", p.Tty.Rows, p.Tty.Cols)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", p.ID, p.Pid, p.State, exit, tty, shellJoin(p.Cmd))
			}
			return tw.Flush()
		}),
	}
}
