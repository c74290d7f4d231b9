package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func inspectCommand() *cli.Command {
	return &cli.Command{
		Name:      "inspect",
		Usage:     "print sandboxes as a JSON array",
		ArgsUsage: "SANDBOX...",
		Description: "Prints a JSON array with the API's object of each SANDBOX (ID or name), like `docker inspect`:\n" +
			"state and reason, image, domain, accelerator, vCPUs and memory, labels, times, exec count,\n" +
			"\"limits\" — the lifetime limits (ttl, idle timeout, exec timeout, max execs) the daemon enforces —,\n" +
			"\"resources\" — the host-side machine limits (disk, CPU quota, I/O, pids, QEMU memory) and how\n" +
			"each is enforced —, \"usage\" and \"network\".\n\n" +
			"Exit status: 0; 125 if any SANDBOX could not be read (the others are still printed).",
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			refs, err := someArgs(c, "agentbox inspect SANDBOX...")
			if err != nil {
				return err
			}
			sbs := []api.Sandbox{}
			var errs []error
			for _, ref := range refs {
				sb, err := cl.GetSandbox(ctx, ref)
				if err != nil {
					if ctx.Err() != nil {
						return err
					}
					errs = append(errs, err)
					continue
				}
				sbs = append(sbs, sb)
			}
			if err := writeJSON(c.App.Writer, sbs); err != nil {
				return err
			}
			return joinRefErrors(c, errs)
		}),
	}
}

// joinRefErrors reports the errors of a command over several sandboxes:
// all but the last are printed, the last is returned (exit 125). An
// unreachable daemon is returned at once so it gets its hint.
func joinRefErrors(c *cli.Context, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	for _, err := range errs[:len(errs)-1] {
		if errors.Is(err, client.ErrUnreachable) {
			return err
		}
		fmt.Fprintln(c.App.ErrWriter, "agentbox:", err)
	}
	return errs[len(errs)-1]
}
