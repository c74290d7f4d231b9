package main

import (
	"context"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// idleFlags are create's flags for what the idle timeout and the TTL do.
func idleFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "idle-action", Usage: "what --idle-timeout does: remove, stop (start boots it again), pause (in memory) or pause-to-disk (QEMU ends, host memory freed)", DefaultText: "remove"},
		&cli.StringFlag{Name: "ttl-action", Usage: "what reaching --ttl does, `ACTION`: remove, stop, pause or pause-to-disk (as --idle-action; any but remove ends the TTL: the sandbox is kept until agentbox timeout sets a new one)", DefaultText: "remove"},
		&cli.DurationFlag{Name: "paused-ttl", Usage: "remove the sandbox `DURATION` after it was paused to disk (whole seconds)", DefaultText: "never"},
	}
}

// setIdleLimits reads idleFlags into req (flags a command lacks read as
// unset).
func setIdleLimits(c *cli.Context, req *api.CreateSandboxRequest) error {
	req.Limits.IdleAction = c.String("idle-action")
	if !api.ValidIdleAction(req.Limits.IdleAction) {
		return fmt.Errorf("--idle-action %q: use remove, stop, pause or pause-to-disk", req.Limits.IdleAction)
	}
	req.Limits.TTLAction = c.String("ttl-action")
	if !api.ValidIdleAction(req.Limits.TTLAction) {
		return fmt.Errorf("--ttl-action %q: use remove, stop, pause or pause-to-disk", req.Limits.TTLAction)
	}
	var err error
	req.Limits.PausedTTLSeconds, err = wholeSeconds(c, "paused-ttl")
	return err
}

func pauseCommand() *cli.Command {
	return &cli.Command{
		Name:      "pause",
		Usage:     "pause running sandboxes (vCPUs stop; --to-disk: saved to disk, QEMU ends)",
		ArgsUsage: "SANDBOX...",
		Description: "Pauses each SANDBOX and prints its reference. In memory its vCPUs stop and QEMU keeps its\n" +
			"memory: `agentbox resume` continues it in milliseconds. With --to-disk its machine (memory,\n" +
			"devices, disk) is saved into its overlay and its QEMU ends, freeing the host's memory; it keeps\n" +
			"its ID, name, network address and files, and `inspect` shows where the state is and its size.\n" +
			"A paused sandbox's TTL keeps running. Commands, file and process calls on it are refused until\n" +
			"it is resumed (or `exec`, `cp` and `port` with --resume, ?resume=true in the API, resume it\n" +
			"first). Detached processes and port forwards continue after the resume, from disk too.\n\n" +
			"Exit status: 0; 125 if any could not be paused (not running, disk full: the message says why).",
		Flags:        []cli.Flag{&cli.BoolFlag{Name: "to-disk", Usage: "save the machine to disk and end its QEMU (frees host memory; resume takes seconds)"}},
		OnUsageError: usageError,
		Action: eachRef("agentbox pause [--to-disk] SANDBOX...", func(ctx context.Context, c *cli.Context, cl *client.Client, ref string) error {
			_, err := cl.PauseSandbox(ctx, ref, c.Bool("to-disk"))
			return err
		}),
	}
}

func resumeCommand() *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "resume paused sandboxes in place (same ID, name, network, files, processes)",
		ArgsUsage: "SANDBOX...",
		Description: "Resumes each paused SANDBOX and prints its reference once it runs. A sandbox paused to disk\n" +
			"gets a new QEMU that loads its saved state; its clock is set to the host's.\n\n" +
			"Exit status: 0; 125 if any could not be resumed (not paused; its saved state gone, damaged or\n" +
			"for another image: it is then failed, with the reason in `inspect`).",
		OnUsageError: usageError,
		Action: eachRef("agentbox resume SANDBOX...", func(ctx context.Context, c *cli.Context, cl *client.Client, ref string) error {
			_, err := cl.ResumeSandbox(ctx, ref)
			return err
		}),
	}
}

func startCommand() *cli.Command {
	return &cli.Command{
		Name:      "start",
		Usage:     "boot stopped sandboxes again on their own disk (files kept, processes gone)",
		ArgsUsage: "SANDBOX...",
		Description: "Boots each stopped (or failed) SANDBOX again, a cold boot on its kept overlay, and prints its\n" +
			"reference once its guest agent answers. It keeps its ID, name, labels, limits and network\n" +
			"policy (its tap is made again with the same name and MAC; its address is allocated again).\n\n" +
			"Exit status: 0; 125 if any could not be started (running or paused, image changed, boot failure).",
		OnUsageError: usageError,
		Action: eachRef("agentbox start SANDBOX...", func(ctx context.Context, c *cli.Context, cl *client.Client, ref string) error {
			_, err := cl.StartSandbox(ctx, ref)
			return err
		}),
	}
}

// eachRef is the action of a command over several sandboxes: do for each
// reference, printing it when done; errors are reported as stop does
// (joinRefErrors).
func eachRef(usage string, do func(ctx context.Context, c *cli.Context, cl *client.Client, ref string) error) cli.ActionFunc {
	return clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
		refs, err := someArgs(c, usage)
		if err != nil {
			return err
		}
		var errs []error
		for _, ref := range refs {
			if err := do(ctx, c, cl, ref); err != nil {
				if ctx.Err() != nil {
					return err
				}
				errs = append(errs, err)
				continue
			}
			fmt.Fprintln(c.App.Writer, ref)
		}
		return joinRefErrors(c, errs)
	})
}
