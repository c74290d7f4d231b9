package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/client"
)

const execUsage = "agentbox exec [FLAGS] SANDBOX -- COMMAND [ARG...]"

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a running sandbox",
		ArgsUsage: "SANDBOX -- COMMAND [ARG...]  |  --agent-socket PATH -- COMMAND [ARG...]",
		Description: "Runs COMMAND in the sandbox SANDBOX (its ID or name) through the daemon, streams its stdout\n" +
			"and stderr live and separately, and exits with the command's exit code. Flags go before SANDBOX.\n" +
			"Stdin is forwarded when it is not a terminal (or with -i), streamed as the command reads it;\n" +
			"Ctrl-C kills the command. With -t the command runs on a terminal the size of ours (following\n" +
			"resizes); -it makes ours raw, so every key (Ctrl-C too) goes to the command, as in a local shell,\n" +
			"and restores it afterwards: `agentbox exec -it SANDBOX -- bash`.\n\n" +
			"With -d the command runs detached: its process ID is printed and `agentbox ps`, `output`,\n" +
			"`stdin` and `kill` reach it later (with -i its stdin stays open for `agentbox stdin`).\n\n" +
			"A paused sandbox is refused (it says how to resume it); with --resume it is resumed first, in\n" +
			"memory or from disk, and the command runs.\n\n" +
			"With --agent-socket PATH (and no SANDBOX) it talks directly to the guest agent of a sandbox that\n" +
			"an in-process `agentbox run --keep` left, without a daemon; one client at a time can hold an\n" +
			"agent socket.\n\n" +
			"Exit status: the command's own; 128+N if it was killed by signal N (130 after Ctrl-C); 124 on\n" +
			"--timeout; 125 if agentbox or the daemon failed (no such sandbox, sandbox not running...); 126 if\n" +
			"the command cannot be run; 127 if it was not found.",
		Flags: append([]cli.Flag{
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "start the command detached and print its process ID"},
			&cli.StringFlag{Name: "agent-socket", Usage: "talk to the guest agent at `PATH` directly (a sandbox of `run --keep`), no daemon"},
			&cli.DurationFlag{Name: "connect-timeout", Value: 10 * time.Second, Usage: "with --agent-socket: give up connecting to the agent after `DURATION`"},
			resumeFlag(),
		}, commandFlags()...),
		OnUsageError: usageError,
		// -it is -i -t.
		UseShortOptionHandling: true,
		Action:                 execAction,
	}
}

// execAction implements `agentbox exec`.
func execAction(c *cli.Context) error {
	if c.String("agent-socket") != "" {
		return agentSocketExec(c)
	}
	return clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
		cl = resuming(c, cl)
		args := c.Args().Slice()
		if len(args) == 0 {
			return fmt.Errorf("no sandbox given: use `%s` (or --agent-socket PATH for a sandbox of `run --keep`)", execUsage)
		}
		ref, rest := args[0], args[1:]
		if len(rest) > 0 && rest[0] == "--" {
			rest = rest[1:]
		} else if len(rest) > 0 && strings.HasPrefix(rest[0], "-") {
			return fmt.Errorf("%q after SANDBOX: flags go before it: `%s`", rest[0], execUsage)
		}
		argv, err := guestArgvFrom(c, rest, execUsage)
		if err != nil {
			return err
		}
		preq, err := execRequest(c, argv)
		if err != nil {
			return err
		}
		req := apiExecRequest(preq)
		if c.Bool("detach") {
			req.StdinOpen = c.Bool("interactive")
			if c.Bool("tty") {
				size := defaultTtySize
				if t, err := terminal(c); err == nil {
					size = t.Size()
				}
				req.Tty = &size
			}
			p, err := cl.StartProcess(ctx, ref, req)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.App.Writer, p.ID)
			return nil
		}
		return daemonExec(ctx, c, cl, ref, req)
	})(c)
}

// agentSocketExec is `agentbox exec --agent-socket PATH -- CMD`: no daemon,
// the guest agent's socket directly.
func agentSocketExec(c *cli.Context) error {
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
	if c.Bool("detach") {
		return errors.New("--detach needs the daemon: use `agentbox exec -d SANDBOX -- COMMAND`, not --agent-socket")
	}
	if c.Bool("tty") {
		return errors.New("-t needs the daemon: use `agentbox exec -it SANDBOX -- COMMAND`, not --agent-socket")
	}
	if c.Bool("resume") {
		return errors.New("--resume needs the daemon (a sandbox of `run --keep` cannot be paused): drop it, or use `agentbox exec --resume SANDBOX -- COMMAND`")
	}
	sock := c.String("agent-socket")
	ctx, gotSignal, stop := interrupts(c.Context)
	defer stop()

	dctx, cancel := context.WithTimeout(ctx, c.Duration("connect-timeout"))
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(dctx, "unix", sock)
	if err != nil {
		return fmt.Errorf("connect to agent socket: %w (is the sandbox still running?)", err)
	}
	ac, err := agent.Dial(dctx, conn, agent.Options{})
	if err != nil {
		return fmt.Errorf("guest agent handshake on %s: %w (another client may hold the socket)", sock, err)
	}
	defer ac.Close()
	return runGuest(ctx, c, ac, req, gotSignal)
}
