package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func logsCommand() *cli.Command {
	return &cli.Command{
		Name:      "logs",
		Usage:     "print a sandbox's serial console log",
		ArgsUsage: "SANDBOX",
		Description: "Copies the sandbox's serial console log (kernel and init messages, panics) to stdout;\n" +
			"with --tail only its last BYTES bytes.",
		Flags: []cli.Flag{
			&cli.Int64Flag{Name: "tail", Usage: "only the last `BYTES` bytes", DefaultText: "all"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			args, err := exactArgs(c, 1, "agentbox logs [--tail BYTES] SANDBOX")
			if err != nil {
				return err
			}
			if c.Int64("tail") < 0 {
				return fmt.Errorf("--tail %d: must be positive", c.Int64("tail"))
			}
			return cl.Console(ctx, args[0], c.Int64("tail"), c.App.Writer)
		}),
	}
}
