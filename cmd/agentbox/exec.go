package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/agent"
)

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a running sandbox (e.g. one left by `run --keep`) through its agent socket",
		ArgsUsage: "--agent-socket PATH -- COMMAND [ARG...]",
		Description: "Connects to the guest agent of a running sandbox through the unix socket `agentbox run --keep`\n" +
			"printed, runs COMMAND there like `run` does (same streams and exit statuses), and leaves the\n" +
			"sandbox running. One client at a time can hold an agent socket.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "agent-socket", Usage: "the sandbox's agent socket `PATH`"},
			&cli.DurationFlag{Name: "connect-timeout", Value: 10 * time.Second, Usage: "give up connecting to the agent after `DURATION`"},
		}, commandFlags()...),
		OnUsageError: usageError,
		Action:       execAction,
	}
}

// execAction implements `agentbox exec`.
func execAction(c *cli.Context) error {
	if err := applyConfig(c); err != nil {
		return err
	}
	argv, err := guestArgv(c, "agentbox exec --agent-socket PATH -- COMMAND [ARG...]")
	if err != nil {
		return err
	}
	req, err := execRequest(c, argv)
	if err != nil {
		return err
	}
	sock := c.String("agent-socket")
	if sock == "" {
		return errors.New("no sandbox: pass --agent-socket PATH (printed by `agentbox run --keep`)")
	}
	ctx, gotSignal, stop := interrupts(c.Context)
	defer stop()

	dctx, cancel := context.WithTimeout(ctx, c.Duration("connect-timeout"))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("connect to agent socket: %w (is the sandbox still running?)", err)
	}
	client, err := agent.Dial(dctx, conn, agent.Options{})
	if err != nil {
		return fmt.Errorf("guest agent handshake on %s: %w (another client may hold the socket)", sock, err)
	}
	defer client.Close()
	return runGuest(ctx, c, client, req, gotSignal)
}
