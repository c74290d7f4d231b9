package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

func rmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove sandboxes and everything they hold",
		ArgsUsage: "SANDBOX...",
		Description: "Removes each SANDBOX (record, overlay disk, logs; its audit entries stay) and prints its\n" +
			"reference. A running sandbox needs -f, which stops it first.\n\n" +
			"Exit status: 0; 125 if any could not be removed (the others still are).",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "force", Aliases: []string{"f"}, Usage: "also remove running sandboxes"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			refs, err := someArgs(c, "agentbox rm [-f] SANDBOX...")
			if err != nil {
				return err
			}
			var errs []error
			for _, ref := range refs {
				if err := cl.DeleteSandbox(ctx, ref, c.Bool("force")); err != nil {
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
