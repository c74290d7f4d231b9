package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func stopCommand() *cli.Command {
	return &cli.Command{
		Name:      "stop",
		Usage:     "stop sandboxes (their VMs end; records and logs stay until rm)",
		ArgsUsage: "SANDBOX...",
		Description: "Stops each SANDBOX's VM and prints its reference once stopped. Stopping a stopped sandbox\n" +
			"is not an error. `agentbox rm` removes it afterwards.\n\n" +
			"Exit status: 0; 125 if any could not be stopped (the others still are).",
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			refs, err := someArgs(c, "agentbox stop SANDBOX...")
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range refs {
				if _, err := cl.StopSandbox(ctx, ref); err != nil {
					if ctx.Err() != nil {
						return err
					}
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(c.App.Writer, ref)
			}
			return joinRefErrors(c, errs)
		}),
	}
}
