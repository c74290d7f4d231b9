package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func historyCommand() *cli.Command {
	return &cli.Command{
		Name:      "history",
		Usage:     "list the commands a sandbox ran (its exec history in the daemon's store)",
		ArgsUsage: "SANDBOX",
		Description: "Prints one line per command, oldest first: its exec ID, start time (UTC), duration, exit code\n" +
			"(- while running or when lost), caller and command. Detached processes are marked with (d).\n" +
			"The history lives in the daemon's store until the sandbox is removed; the audit log keeps more.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "last", Aliases: []string{"n"}, Usage: "only the newest `N` commands"},
			&cli.BoolFlag{Name: "json", Usage: "print the records as a JSON array"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 1, "agentbox history [--last N] SANDBOX")
			if err != nil {
				return err
			}
			if c.Int("last") < 0 {
				return fmt.Errorf("--last %d: want a positive number", c.Int("last"))
			}
			execs, err := cl.ExecHistory(ctx, args[0], c.Int("last"))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(execs)
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTARTED\tDURATION\tEXIT\tCALLER\tCMD")
			for _, e := range execs {
				dur, exit := "-", "-"
				if e.EndedAt != nil {
					dur = e.EndedAt.Sub(e.StartedAt).Round(time.Millisecond).String()
				}
				if e.ExitCode != nil {
					exit = fmt.Sprint(*e.ExitCode)
				}
				cmd := shellJoin(e.Cmd)
				if e.Detached {
					cmd = "(d) " + cmd
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, e.StartedAt.UTC().Format("2006-01-02 15:04:05"), dur, exit, e.Caller, cmd)
			}
			return tw.Flush()
		}),
	}
}
