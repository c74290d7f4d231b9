package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func killCommand() *cli.Command {
	return &cli.Command{
		Name:      "kill",
		Usage:     "send a signal to a detached process (its whole process group)",
		ArgsUsage: "SANDBOX PROCESS",
		Description: "Signals the process group of PROCESS, a detached process of `agentbox exec -d`. --signal takes\n" +
			"a name (KILL, TERM, SIGINT) or a number.\n\n" +
			"Exit status: 0 when sent; 125 otherwise (no such process, already exited, bad signal).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "signal", Aliases: []string{"s"}, Value: "KILL", Usage: "`SIGNAL` name or number"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 2, "agentbox kill [-s SIGNAL] SANDBOX PROCESS")
			if err != nil {
				return err
			}
			return cl.KillProcess(ctx, args[0], args[1], c.String("signal"))
		}),
	}
}
