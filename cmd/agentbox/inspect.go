package main

import (
	"context"

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
			"each is enforced —, \"usage\" and \"network\"; in a cluster \"node\", the node it lives on (any node\n" +
			"answers for any sandbox).\n\n" +
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
