package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "boot a fresh sandbox, run one command in it, destroy it",
		ArgsUsage: "-- COMMAND [ARG...]",
		Description: "Boots a new VM from --image, runs COMMAND inside it through the guest agent, streams its\n" +
			"stdout and stderr live and separately, and exits with the command's exit code. The VM and its\n" +
			"overlay disk are destroyed afterwards (unless --keep).\n\n" +
			"COMMAND is run as an argv, without a shell; use --shell or `sh -c '...'` for shell syntax.\n" +
			"Stdin is forwarded when it is not a terminal (or with -i).\n\n" +
			"Exit status: the command's own; 128+N if it was killed by signal N; 124 on --timeout;\n" +
			"125 if agentbox itself failed; 126 if the command cannot be run; 127 if it was not found.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "image", Usage: "image `DIR` (holds manifest.toml)", EnvVars: []string{"AGENTBOX_IMAGE"}},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the command (and its process group) after `DURATION`; exit 124", DefaultText: "none"},
			&cli.IntFlag{Name: "cpus", Usage: "virtual `CPUS`", DefaultText: "the image's"},
			&cli.IntFlag{Name: "memory", Usage: "guest memory in `MiB`", DefaultText: "the image's"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` in the command's environment (repeatable)"},
			&cli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working `DIR` of the command in the guest"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run as `UID[:GID]` in the guest (default root)"},
			&cli.BoolFlag{Name: "shell", Usage: "run the arguments joined by spaces with /bin/sh -c"},
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "forward stdin even when it is a terminal"},
			&cli.BoolFlag{Name: "keep", Usage: "leave the VM running afterwards and print how to reach it"},
			&cli.StringFlag{Name: "accel", Value: "auto", Usage: "accelerator: auto (KVM only where a probe guest runs), kvm or tcg", EnvVars: []string{"AGENTBOX_ACCEL"}},
			&cli.DurationFlag{Name: "boot-timeout", Value: 120 * time.Second, Usage: "give up if the guest agent has not answered after `DURATION`"},
			&cli.BoolFlag{Name: "verbose", Aliases: []string{"v"}, Usage: "say which accelerator was chosen and how long the boot took"},
			&cli.BoolFlag{Name: "qemu-ga-channel", Hidden: true, Usage: "add qemu-ga's channel (benchmarks)"},
		},
		Action: runAction,
	}
}

// runAction implements `agentbox run`.
func runAction(c *cli.Context) error {
	if err := applyConfig(c); err != nil {
		return err
	}
	argv := c.Args().Slice()
	if len(argv) == 0 {
		return errors.New("no command given: use `agentbox run --image DIR -- COMMAND [ARG...]`")
	}
	if c.Bool("shell") {
		argv = []string{"/bin/sh", "-c", strings.Join(argv, " ")}
	}
	req, err := execRequest(c, argv)
	if err != nil {
		return err
	}
	if c.String("image") == "" {
		return errors.New("no image: pass --image DIR (or set AGENTBOX_IMAGE); `make test-image` builds one")
	}
	mode, err := accel.ParseMode(c.String("accel"))
	if err != nil {
		return err
	}

	// Ctrl-C or SIGTERM: kill the guest command, tear everything down, exit
	// 128+N. The sandbox's own life is not bound to ctx; teardown runs under
	// context.WithoutCancel.
	ctx, cancel := context.WithCancel(c.Context)
	defer cancel()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var gotSignal syscall.Signal
	go func() {
		if s, ok := <-sigs; ok {
			gotSignal = s.(syscall.Signal)
			cancel()
		}
	}()

	stateDir, err := filepath.Abs(c.String("state-dir"))
	if err != nil {
		return err
	}
	img, err := image.Load(ctx, c.String("image"), image.LoadOptions{VerifyCacheDir: filepath.Join(stateDir, "image-verify")})
	if err != nil {
		return err
	}
	choice, err := accel.Choose(mode, nil)
	if err != nil {
		return err
	}
	verbose := c.Bool("verbose")
	if verbose {
		fmt.Fprintf(os.Stderr, "agentbox: accelerator %s (%s)\n", choice.Accel, choice.Reason)
	}

	env, err := openEnv(ctx, c)
	if err != nil {
		return err
	}
	defer env.Close()

	sb, err := env.mgr.Create(ctx, sandbox.Options{
		Image:             img,
		Accel:             choice,
		VCPUs:             c.Int("cpus"),
		MemoryMiB:         c.Int("memory"),
		BootTimeout:       c.Duration("boot-timeout"),
		GuestAgentChannel: c.Bool("qemu-ga-channel"),
	})
	if err != nil {
		if gotSignal != 0 {
			return &exitError{code: ExitSignalBase + int(gotSignal), msg: "interrupted while booting; sandbox removed"}
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

	var stdin *os.File
	if c.Bool("interactive") || !isTerminal(os.Stdin) {
		stdin = os.Stdin
		req.Stdin = true
	}
	st, err := execWithBackstop(ctx, sb, req, stdin, c.Duration("timeout"))
	if gotSignal != 0 {
		return &exitError{code: ExitSignalBase + int(gotSignal), msg: fmt.Sprintf("%s: guest command killed, sandbox removed", gotSignal)}
	}
	var startErr *agentproto.ExecError
	if err != nil && !errors.As(err, &startErr) {
		return fmt.Errorf("exec: %w", err)
	}
	code, msg := statusCode(st, c.Duration("timeout").String())
	if code != 0 || msg != "" {
		return &exitError{code: code, msg: msg}
	}
	return nil
}

// execWithBackstop runs req in sb. The guest agent enforces req's timeout;
// as a backstop against a hung guest, the host gives up 5 s after it and
// reports a timeout (the VM is destroyed by the caller).
func execWithBackstop(ctx context.Context, sb *sandbox.Sandbox, req agentproto.ExecRequest, stdin *os.File, timeout time.Duration) (agentproto.ExitStatus, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+5*time.Second)
		defer cancel()
	}
	var in = stdinReader(stdin)
	st, err := sb.Exec(ctx, req, in, os.Stdout, os.Stderr)
	if err != nil && timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return agentproto.ExitStatus{TimedOut: true}, nil
	}
	return st, err
}

// execRequest builds the guest exec request from run's flags.
func execRequest(c *cli.Context, argv []string) (agentproto.ExecRequest, error) {
	req := agentproto.ExecRequest{
		Argv: argv,
		Dir:  c.String("workdir"),
	}
	if t := c.Duration("timeout"); t > 0 {
		req.TimeoutMs = t.Milliseconds()
	} else if t < 0 {
		return req, fmt.Errorf("--timeout %s: must be positive", t)
	}
	for _, kv := range c.StringSlice("env") {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return req, fmt.Errorf("--env %q: want KEY=VALUE", kv)
		}
		req.Env = append(req.Env, kv)
	}
	if u := c.String("user"); u != "" {
		uidStr, gidStr, hasGID := strings.Cut(u, ":")
		uid, err := strconv.ParseUint(uidStr, 10, 32)
		if err != nil {
			return req, fmt.Errorf("--user %q: want a numeric UID[:GID]", u)
		}
		uid32 := uint32(uid)
		req.UID = &uid32
		gid32 := uid32
		if hasGID {
			gid, err := strconv.ParseUint(gidStr, 10, 32)
			if err != nil {
				return req, fmt.Errorf("--user %q: want a numeric UID[:GID]", u)
			}
			gid32 = uint32(gid)
		}
		req.GID = &gid32
	}
	return req, nil
}

// printKept tells the user how to reach a sandbox left running by --keep.
func printKept(c *cli.Context, sb *sandbox.Sandbox) {
	uri := c.String("uri")
	fmt.Fprintf(os.Stderr, `agentbox: sandbox %s kept running (domain %s, %s)
  agent socket: %s
  console log:  %s
  overlay:      %s
  inspect:      virsh -c %s dominfo %s
  remove:       virsh -c %s destroy %s && rm -rf %s %s
`, sb.ID, sb.Domain, sb.Accel.Accel, sb.AgentSocket, sb.ConsoleLog, sb.Overlay, uri, sb.Domain, uri, sb.Domain, sb.Dir, sb.AgentSocket)
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
