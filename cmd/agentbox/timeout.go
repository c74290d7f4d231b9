package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

// notPositive is what a timeout of zero or less is told.
const notPositive = "a timeout is a positive duration from now, e.g. 30m (a TTL cannot be cleared: set a long one, up to 10 years)"

func timeoutCommand() *cli.Command {
	return &cli.Command{
		Name:      "timeout",
		Usage:     "set a sandbox's TTL from now and print its new expiry",
		ArgsUsage: "SANDBOX DURATION",
		Description: "Makes SANDBOX expire DURATION from now (e.g. 90s, 30m, 2h; whole seconds, at least 1s): the\n" +
			"daemon stops and removes it then, as for --ttl. It replaces the TTL, longer or shorter; the\n" +
			"idle timeout stays. Nothing else moves the expiry: using a sandbox never extends it. Prints\n" +
			"the new expiry (RFC 3339, UTC), which `inspect` shows as expires_at. A TTL cannot be cleared:\n" +
			"set a long one instead (up to 10 years).\n\n" +
			"Exit status: 0; 125 if it could not be set (no such sandbox, bad duration).",
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if a := c.Args().Slice(); len(a) == 2 && strings.HasPrefix(a[1], "-") {
				if _, err := time.ParseDuration(a[1]); err == nil {
					return fmt.Errorf("timeout %s: %s", a[1], notPositive) // a negative duration, not a flag
				}
			}
			args, err := exactArgs(c, 2, "agentbox timeout SANDBOX DURATION")
			if err != nil {
				return err
			}
			d, err := time.ParseDuration(args[1])
			switch {
			case err != nil:
				return fmt.Errorf("duration %q: want a duration such as 90s, 30m or 2h", args[1])
			case d <= 0:
				return fmt.Errorf("timeout %s: %s", args[1], notPositive)
			case d < time.Second:
				return fmt.Errorf("duration %s: must be at least 1s", d)
			case d%time.Second != 0:
				return fmt.Errorf("duration %s: must be whole seconds (e.g. 90s, 30m, 2h)", d)
			}
			sb, err := cl.SetTimeout(ctx, args[0], d)
			if err != nil {
				return err
			}
			if sb.ExpiresAt != nil {
				fmt.Fprintln(c.App.Writer, sb.ExpiresAt.UTC().Format(time.RFC3339))
			}
			return nil
		}),
	}
}
