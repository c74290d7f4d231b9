package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func outputCommand() *cli.Command {
	return &cli.Command{
		Name:      "output",
		Usage:     "print a detached process's output",
		ArgsUsage: "SANDBOX PROCESS",
		Description: "Copies the stdout and stderr the detached process PROCESS (an ID from `exec -d` or `ps`) has\n" +
			"produced to ours, from byte --offset of its combined output (the daemon keeps the last 8 MiB).\n" +
			"With -f it keeps following until the process ends and then exits with its exit status, like\n" +
			"`exec` would have; without -f it exits 0.\n\n" +
			"Exit status (-f): the process's own; 128+N if killed by signal N; 124 on timeout; 126/127 if it\n" +
			"could not be run; 125 if agentbox failed or the process was lost. 130/143 on Ctrl-C/SIGTERM (the\n" +
			"process keeps running).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "wait for more output until the process ends; exit with its status"},
			&cli.Int64Flag{Name: "offset", Usage: "start at byte `N` of the combined output"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, "agentbox output [-f] [--offset N] SANDBOX PROCESS")
			if err != nil {
				return err
			}
			if c.Int64("offset") < 0 {
				return fmt.Errorf("--offset %d: must be positive", c.Int64("offset"))
			}
			follow := c.Bool("follow")
			st, err := cl.ProcessOutput(ctx, args[0], args[1], c.Int64("offset"), follow, c.App.Writer, c.App.ErrWriter)
			if err != nil || !follow {
				return err
			}
			if st == nil {
				return fmt.Errorf("process %s was lost before it ended (daemon restart or guest death): its exit status is unknown", args[1])
			}
			return exitFor(guestStatus(*st, 0))
		}),
	}
}
