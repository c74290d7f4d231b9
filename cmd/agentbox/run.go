package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "boot a fresh sandbox, run one command in it, destroy it",
		ArgsUsage: "[PROFILE] -- COMMAND [ARG...]",
		Description: "Boots a new VM from --image DIR or from PROFILE, an image of the flake (--flake; built with\n" +
			"nix, see `agentbox profile --help`; --locked refuses an image that differs from the lock file),\n" +
			"runs COMMAND inside it through the guest agent, streams its\n" +
			"stdout and stderr live and separately, and exits with the command's exit code. The VM and its\n" +
			"overlay disk are destroyed afterwards (unless --keep).\n\n" +
			"COMMAND is run as an argv, without a shell; use --shell or `sh -c '...'` for shell syntax.\n" +
			"Stdin is forwarded when it is not a terminal (or with -i); -t runs the command on a terminal,\n" +
			"-it with ours in raw mode (`agentbox run -it --image DIR -- python3`), as `agentbox exec` does.\n\n" +
			"When a daemon answers on --socket (or --host), the sandbox is created, used and removed through\n" +
			"it (labelled agentbox.run=1, with a TTL as a backstop should this command be killed); with no\n" +
			"daemon there (no socket, or nothing accepting on it) or with --local, agentbox runs the daemon's\n" +
			"service in-process, talking to libvirt itself, with its own state in STATE_DIR/local/RUN-ID (removed\n" +
			"afterwards); its VM dies with the process even on kill -9 (libvirt autodestroy, except with --keep),\n" +
			"and the next in-process run or `agentbox serve` removes what a killed run left on disk. A daemon that\n" +
			"answers with an error is reported, not bypassed.\n\n" +
			"Exit status: the command's own; 128+N if it was killed by signal N; 124 on --timeout;\n" +
			"125 if agentbox itself failed; 126 if the command cannot be run; 127 if it was not found.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "image", Usage: "image `DIR` (holds manifest.toml)", EnvVars: []string{"AGENTBOX_IMAGE"}},
			&cli.IntFlag{Name: "cpus", Usage: "virtual `CPUS`", DefaultText: "the image's"},
			&cli.IntFlag{Name: "memory", Usage: "guest memory in `MiB`", DefaultText: "the image's"},
			&cli.BoolFlag{Name: "keep", Usage: "leave the VM running afterwards and print how to reach it"},
			&cli.BoolFlag{Name: "local", Usage: "run in-process even if a daemon is reachable"},
			&cli.StringFlag{Name: "accel", Value: "auto", Usage: "accelerator: auto (KVM only where a probe guest runs), kvm or tcg", EnvVars: []string{"AGENTBOX_ACCEL"}},
			&cli.DurationFlag{Name: "boot-timeout", Value: 120 * time.Second, Usage: "give up if the guest agent has not answered after `DURATION`"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "say which accelerator was chosen and how long the boot took"},
			&cli.BoolFlag{Name: "qemu-ga-channel", Hidden: true, Usage: "add qemu-ga's channel (benchmarks)"},
			networkFlag, allowFlag, dnsFlag,
			&cli.BoolFlag{Name: "locked", Usage: "refuse a PROFILE whose image differs from the lock file (written by agentbox profile lock)"},
		}, append(append(commandFlags(), resourceFlags()...), profileFlags()...)...),
		OnUsageError: usageError,
		// -it is -i -t.
		UseShortOptionHandling: true,
		Action:                 runAction,
	}
}

// runAction implements `agentbox run`.
func runAction(c *cli.Context) error {
	if err := applyConfig(c); err != nil {
		return err
	}
	profileName, rest, err := imageArgs(c, true, "agentbox run [FLAGS] PROFILE -- COMMAND [ARG...]")
	if err != nil {
		return err
	}
	usage := "agentbox run --image DIR -- COMMAND [ARG...]"
	if profileName != "" {
		usage = "agentbox run " + profileName + " -- COMMAND [ARG...]"
	}
	argv, err := guestArgvFrom(c, rest, usage)
	if err != nil {
		return err
	}
	req, err := execRequest(c, argv)
	if err != nil {
		return err
	}
	if _, err := accel.ParseMode(c.String("accel")); err != nil {
		return err
	}
	if c.Bool("tty") { // refuse before anything boots
		if _, err := terminal(c); err != nil {
			return err
		}
	}

	// Ctrl-C or SIGTERM: kill the guest command, tear everything down, exit
	// 128+N. The sandbox's own life is not bound to ctx: teardown runs
	// under context.WithoutCancel.
	ctx, gotSignal, stop := interrupts(c.Context)
	defer stop()

	imageDir := c.String("image")
	if profileName != "" {
		if imageDir, err = resolveProfile(ctx, c, profileName, c.Bool("verbose")); err != nil {
			if sig := gotSignal(); sig != 0 {
				return signalExit(sig, "interrupted while building profile "+profileName)
			}
			return err
		}
	}

	creq, err := createRequest(c, imageDir)
	if err != nil {
		return err
	}
	runID := newRunID()
	creq.Labels = map[string]string{runLabel: "1", runIDLabel: runID}
	if !c.Bool("local") && !c.Bool("qemu-ga-channel") {
		cl, err := dial(c)
		if err != nil {
			return err
		}
		_, err = cl.Info(ctx)
		absent := noDaemon(c.String("host"), err)
		switch {
		case err == nil:
			return runSandbox(ctx, c, daemonTarget(c, cl), creq, req, gotSignal)
		case gotSignal() != 0:
			return signalExit(gotSignal(), "interrupted")
		case errors.Is(err, client.ErrUnreachable) && !absent:
			return fmt.Errorf("%w, or pass --local to run in-process", unreachable(c))
		case !absent:
			return fmt.Errorf("the agentbox daemon at %s: %w (pass --local to run in-process without it)", daemonAddr(c), err)
		}
	}

	// In-process: the same service, in this process (local.go, vmctl/host).
	svc, err := startLocal(ctx, c, localOptions{
		RunID:             runID,
		Keep:              c.Bool("keep"),
		Verbose:           c.Bool("verbose"),
		GuestAgentChannel: c.Bool("qemu-ga-channel"),
	})
	if err != nil {
		if sig := gotSignal(); sig != 0 {
			return signalExit(sig, "interrupted")
		}
		return err
	}
	defer func() {
		if err := svc.Close(ctx); err != nil {
			fmt.Fprintln(c.App.ErrWriter, "agentbox: teardown:", err)
		}
	}()
	return runSandbox(ctx, c, runTarget{cl: svc.Client, kept: func(sb api.Sandbox) { printKept(c.App.ErrWriter, svc, sb) }}, creq, req, gotSignal)
}
