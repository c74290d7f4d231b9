package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func psCommand() *cli.Command {
	return &cli.Command{
		Name:      "ps",
		Usage:     "list a sandbox's detached processes (`exec -d`)",
		ArgsUsage: "SANDBOX",
		Description: "Prints one line per detached process, oldest first: its ID (for `output`, `stdin`, `kill`),\n" +
			"guest PID, state (running, exited, lost), exit code once exited, its terminal's size (ROWSxCOLS, `-`\n" +
			"without one: `attach -it` those) and command. For a paused sandbox they are as of its pause\n" +
			"(the guest cannot be asked), also after a restart of the daemon; a note on stderr says so.",
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
			if err := tw.Flush(); err != nil {
				return err
			}
			if slices.ContainsFunc(procs, func(p api.Process) bool { return p.State == api.ProcessRunning }) {
				if sb, err := cl.GetSandbox(ctx, args[0]); err == nil && sb.State == api.StatePaused {
					fmt.Fprintf(c.App.ErrWriter, "agentbox: sandbox %s is paused: its processes are shown as they were when it was paused; they go on when it resumes (agentbox resume %s)\n", args[0], args[0])
				}
			}
			return nil
		}),
	}
}
