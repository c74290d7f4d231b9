package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
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
			"Stdin is forwarded when it is not a terminal (or with -i).\n\n" +
			"When a daemon answers on --socket (or --host), the sandbox is created, used and removed through\n" +
			"it (labelled agentbox.run=1, with a TTL as a backstop should this command be killed); with no\n" +
			"daemon there (no socket, or nothing accepting on it) or with --local, agentbox runs the sandbox\n" +
			"in-process, talking to libvirt itself. A daemon that answers with an error is reported, not\n" +
			"bypassed.\n\n" +
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
			networkFlag, allowFlag,
			&cli.BoolFlag{Name: "locked", Usage: "refuse a PROFILE whose image differs from the lock file (written by agentbox profile lock)"},
		}, append(append(commandFlags(), resourceFlags()...), profileFlags()...)...),
		OnUsageError: usageError,
		Action:       runAction,
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
	mode, err := accel.ParseMode(c.String("accel"))
	if err != nil {
		return err
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
				return &exitError{code: ExitSignalBase + int(sig), msg: "interrupted while building profile " + profileName}
			}
			return err
		}
	}

	if !c.Bool("local") && !c.Bool("qemu-ga-channel") {
		cl, err := dial(c)
		if err != nil {
			return err
		}
		_, err = cl.Info(ctx)
		absent := noDaemon(c.String("host"), err)
		switch {
		case err == nil:
			return runViaDaemon(ctx, c, cl, imageDir, req, gotSignal)
		case gotSignal() != 0:
			return &exitError{code: ExitSignalBase + int(gotSignal()), msg: "interrupted"}
		case errors.Is(err, client.ErrUnreachable) && !absent:
			return fmt.Errorf("%w, or pass --local to run in-process", unreachable(c))
		case !absent:
			return fmt.Errorf("the agentbox daemon at %s: %w (pass --local to run in-process without it)", daemonAddr(c), err)
		}
	}

	stateDir, err := filepath.Abs(c.String("state-dir"))
	if err != nil {
		return err
	}
	img, err := image.Load(ctx, imageDir, image.LoadOptions{VerifyCacheDir: filepath.Join(stateDir, "image-verify")})
	if err != nil {
		return err
	}
	choice, err := accel.Choose(mode, nil)
	if err != nil {
		return err
	}
	// Say which accelerator --accel auto chose: always with -v, and on a
	// terminal (a person wonders why TCG is slow; a script's stderr stays
	// the command's own).
	verbose := c.Bool("verbose")
	if verbose || (mode == accel.ModeAuto && isTerminal(os.Stderr)) {
		fmt.Fprintf(os.Stderr, "agentbox: accelerator %s (%s)\n", choice.Accel, choice.Reason)
	}

	policy, err := networkPolicy(c)
	if err != nil {
		return err
	}
	if !c.IsSet("network") && !c.IsSet("allow") {
		policy = img.Manifest.DefaultNetwork() // the profile's policy
	}
	env, err := openEnv(ctx, c)
	if err != nil {
		return err
	}
	defer env.Close()
	if policy.HasNIC() {
		logger, _ := newLogger(c.String("log-level"))
		netw, err := localNetwork(logger)
		if err != nil {
			return err
		}
		env.mgr.SetNetwork(netw)
	}

	resources, err := resourceRequest(c)
	if err != nil {
		return err
	}
	sb, err := env.mgr.Create(ctx, sandbox.Options{
		Image:             img,
		Accel:             choice,
		VCPUs:             c.Int("cpus"),
		MemoryMiB:         c.Int("memory"),
		BootTimeout:       c.Duration("boot-timeout"),
		GuestAgentChannel: c.Bool("qemu-ga-channel"),
		Network:           policy,
		Resources:         resources,
	})
	if err != nil {
		if sig := gotSignal(); sig != 0 {
			return &exitError{code: ExitSignalBase + int(sig), msg: "interrupted while booting; sandbox removed"}
		}
		return fmt.Errorf("boot sandbox: %w", err)
	}
	if verbose {
		fmt.Fprintf(os.Stderr, "agentbox: sandbox %s booted in %d ms (%s, %d vCPU, %d MiB)\n", sb.ID, sb.BootTime.Milliseconds(), choice.Accel, sb.VCPUs, sb.Memory)
	}
	keep := c.Bool("keep")
	defer func() {
		if keep {
			printKept(c, sb)
			return
		}
		if err := env.mgr.Destroy(context.WithoutCancel(ctx), sb); err != nil {
			fmt.Fprintln(os.Stderr, "agentbox: teardown:", err)
		}
	}()
	return runGuest(ctx, c, sb, req, gotSignal)
}

// printKept tells the user how to reach a sandbox left running by --keep.
func printKept(c *cli.Context, sb *sandbox.Sandbox) {
	uri := c.String("uri")
	fmt.Fprintf(os.Stderr, `agentbox: sandbox %s kept running (domain %s, %s)
  agent socket: %s
  console log:  %s
  overlay:      %s
  exec:         agentbox exec --agent-socket %s -- COMMAND [ARG...]
  inspect:      virsh -c %s dominfo %s
  remove:       virsh -c %s destroy %s && rm -rf %s %s
`, sb.ID, sb.Domain, sb.Accel.Accel, sb.AgentSocket, sb.ConsoleLog, sb.Overlay, sb.AgentSocket, uri, sb.Domain, uri, sb.Domain, sb.Dir, sb.AgentSocket)
}
