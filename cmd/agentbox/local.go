package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/host"
)

// localOptions are what an in-process run asks of its service.
type localOptions struct {
	// RunID names the run's state directories.
	RunID string
	// Keep starts domains without autodestroy, so they outlive the
	// process.
	Keep bool
	// Verbose says which accelerator was chosen (also said on a terminal
	// for --accel auto).
	Verbose bool
	// GuestAgentChannel: --qemu-ga-channel.
	GuestAgentChannel bool
}

// startLocal starts the in-process service (a local vmctl/host) from the
// global flags, saying on stderr what its sweep of killed in-process runs
// removed.
func startLocal(ctx context.Context, c *cli.Context, o localOptions) (*host.Host, error) {
	logger, err := newLogger(c.String("log-level"))
	if err != nil {
		return nil, err
	}
	errw := c.App.ErrWriter
	opts := hostOptions(c, logger, "agentbox:")
	opts.Local = &host.LocalOptions{
		RunID: o.RunID,
		Keep:  o.Keep,
		OnAccel: func(m accel.Mode, choice accel.Choice) {
			// Say which accelerator --accel auto chose: always with -v,
			// and on a terminal (a person wonders why TCG is slow; a
			// script's stderr stays the command's own).
			if o.Verbose || (m == accel.ModeAuto && isTerminal(os.Stderr)) {
				fmt.Fprintf(errw, "agentbox: accelerator %s (%s)\n", choice.Accel, choice.Reason)
			}
		},
		GuestAgentChannel: o.GuestAgentChannel,
	}
	return host.Start(ctx, opts)
}

// hostOptions returns the host.Options every command that starts the
// service in this process (serve, run --local, mcp --local) takes from the
// global flags: libvirt, the state and runtime directories, the logger and
// version, and Say writing "PREFIX line" to the CLI's stderr. The caller
// adds its own fields.
func hostOptions(c *cli.Context, logger *slog.Logger, prefix string) host.Options {
	errw := c.App.ErrWriter
	return host.Options{
		URI:           c.String("uri"),
		LibvirtSocket: c.String("libvirt-socket"),
		StateDir:      c.String("state-dir"),
		RuntimeDir:    c.String("runtime-dir"),
		Logger:        logger,
		Version:       version,
		Say:           func(line string) { fmt.Fprintln(errw, prefix, line) },
	}
}

// printKept tells the user how to reach and remove the sandbox sb that
// --keep left running after an in-process run.
func printKept(w io.Writer, svc *host.Host, sb api.Sandbox) {
	k, err := svc.Keep(sb)
	if err != nil {
		fmt.Fprintf(w, "agentbox: %v\n", err)
		return
	}
	if k.MarkErr != nil {
		fmt.Fprintf(w, "agentbox: %v\n", k.MarkErr)
	}
	fmt.Fprintf(w, `agentbox: sandbox %s kept running (domain %s, %s)
  agent socket: %s
  console log:  %s
  overlay:      %s
  exec:         agentbox exec --agent-socket %s -- COMMAND [ARG...]
  inspect:      %s
  remove:       %s
`, sb.ID, sb.Domain, sb.Accel, k.AgentSocket, k.ConsoleLog, k.Overlay, k.AgentSocket, k.Inspect, k.Remove)
}
