// Command agentbox-guest is the agentbox guest agent. It runs inside the VM,
// serves the host over a virtio-serial port (see vmctl/guestagent) and, with
// --init, is the guest's PID 1.
//
// Build it static: CGO_ENABLED=0 go build -trimpath ./cmd/agentbox-guest
//
// Usage:
//
//	agentbox-guest [--port NAME] [--user NAME|UID] [--path PATH] [--init] [--version]
//
// The port name defaults to agentbox.port=NAME on the kernel command line,
// else org.agentbox.agent.0. --user (or agentbox.user= on the kernel
// command line) makes commands that name no uid run as that account, and
// gives it the files the host writes; --path sets the commands' PATH
// (NixOS guests: /run/current-system/sw/bin).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = "dev"

const (
	defaultPort     = "org.agentbox.agent.0"
	defaultHostname = "agentbox"
	// portWait bounds how long the agent waits for its port to appear
	// (virtio modules still loading).
	portWait = 60 * time.Second
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// config is the parsed command line.
type config struct {
	port        string
	user        string
	path        string
	init        bool
	showVersion bool
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("agentbox-guest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.port, "port", "", "virtio-serial port `name` (default: agentbox.port= from the kernel command line, else "+defaultPort+")")
	fs.StringVar(&c.user, "user", "", "run commands that name no uid as this guest `account` (name or uid; default: agentbox.user= from the kernel command line, else root)")
	fs.StringVar(&c.path, "path", "", "the `PATH` commands start with (default: "+agentproto.DefaultPath+")")
	fs.BoolVar(&c.init, "init", false, "run as the guest's init (PID 1): mount /proc, /sys, /dev…, set the hostname, bring lo up, reap orphans, power off on shutdown")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, nil
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "agentbox-guest:", err)
		return 2
	}
	if cfg.showVersion {
		fmt.Fprintln(os.Stdout, "agentbox-guest", version)
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "agentbox-guest")

	// Reap from the start: as PID 1 every orphan of the guest is ours.
	guestagent.StartReaper()
	if cfg.init {
		if err := setupInit(log); err != nil {
			log.Error("init setup incomplete", "err", err)
		}
	}
	cmdline := parseCmdline(readFile("/proc/cmdline"))
	if cfg.init {
		setHostname(log, orDefault(cmdline["agentbox.hostname"], defaultHostname))
	}
	bootNetwork(log, cmdline["agentbox.net"])
	guestagent.SetupLimits(log, cfg.init) // grow / to its disk; commands' cgroup
	if err := guestagent.ProtectFromOOM(); err != nil {
		log.Warn("cannot protect the agent from the OOM killer", "err", err)
	}
	portName := orDefault(cfg.port, orDefault(cmdline["agentbox.port"], defaultPort))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	opts := guestagent.Options{Version: version, Logger: log, Path: cfg.path, ConfigureNetwork: guestagent.ConfigureNetwork}
	if name := orDefault(cfg.user, cmdline["agentbox.user"]); name != "" {
		u := guestagent.LookupUser(name)
		if u == nil {
			// Refuse to serve rather than run everything as root by
			// surprise: the host sees the guest die with this line.
			fmt.Fprintf(stderr, "agentbox-guest: --user %s: no such account in /etc/passwd\n", name)
			if cfg.init {
				powerOff(log, false)
			}
			return 2
		}
		opts.User = u
	}
	if cfg.init {
		opts.Shutdown = func(reboot bool) { powerOff(log, reboot) }
	}

	err = serve(ctx, log, stderr, portName, opts)
	if cfg.init {
		// PID 1 must never exit: a SIGTERM or a fatal error powers off.
		log.Error("agent stopped, powering off", "err", err)
		powerOff(log, false)
	}
	if err != nil && ctx.Err() == nil {
		log.Error("agent failed", "err", err)
		return 1
	}
	return 0
}

// serve opens the port once (waiting for it to appear) and serves host
// sessions until ctx ends.
func serve(ctx context.Context, log *slog.Logger, console io.Writer, portName string, opts guestagent.Options) error {
	f, err := openPortWait(ctx, portName)
	if err != nil {
		return err
	}
	defer f.Close()
	dev := f.Name()
	if real, err := filepath.EvalSymlinks(dev); err == nil {
		dev = real
	}
	fmt.Fprintf(console, "agentbox-guest: ready on %s\n", dev)
	return guestagent.ServePort(ctx, f, opts, func(err error) {
		if err != nil {
			log.Warn("host session failed", "err", err)
		}
	})
}

// openPortWait retries OpenPort until it succeeds, ctx ends or portWait
// passed.
func openPortWait(ctx context.Context, name string) (*os.File, error) {
	deadline := time.Now().Add(portWait)
	for {
		f, err := guestagent.OpenPort(name)
		if err == nil {
			return f, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no virtio-serial port %q after %v: %w", name, portWait, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// parseCmdline returns the key=value words of a kernel command line (bare
// words map to ""); later words win.
func parseCmdline(s string) map[string]string {
	m := map[string]string{}
	for _, w := range strings.Fields(s) {
		k, v, _ := strings.Cut(w, "=")
		m[k] = strings.Trim(v, `"`)
	}
	return m
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// orDefault returns a unless it is empty, else b.
func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
