package inprocess

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/revert"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// Config is what an in-process service is started with.
type Config struct {
	// URI is the libvirt URI (e.g. qemu:///system).
	URI string
	// LibvirtSocket is libvirtd's socket; "" derives it from URI.
	LibvirtSocket string
	// StateDir and RuntimeDir are the host's agentbox state and runtime
	// dirs (relative ones are taken from the working directory); the run
	// keeps its state in STATE/local/RunID and RUNTIME/local-RunID, and
	// shares STATE/image-verify, the image verification cache.
	StateDir, RuntimeDir string
	// RunID names the run's state directories (16 hex digits by
	// convention; the CLI labels its sandbox agentbox.run-id=RunID).
	RunID string
	// Keep starts domains without autodestroy, so they can outlive the
	// process (see Service.Keep).
	Keep bool
	// Logger logs the service; nil discards. The API server's request
	// log is on only at debug level (the front reports errors itself).
	Logger *slog.Logger
	// Version is reported by the service's Info.
	Version string
	// OnAccel, when set, is told each accelerator chosen for a create's
	// mode (accel.Choose with the host's probe), e.g. to say which one
	// "auto" chose.
	OnAccel func(mode accel.Mode, choice accel.Choice)
	// OnSweep, when set, is told each line of Start's sweep (see Sweep)
	// as it happens, before the service starts.
	OnSweep func(line string)
	// GuestAgentChannel adds the QEMU guest agent's channel to domains
	// (daemon.Config.GuestAgentChannel).
	GuestAgentChannel bool
	// Network makes the network provider on the first sandbox whose
	// policy needs one; nil means NewNetwork with Logger.
	Network func() (sandbox.NetworkProvider, error)
}

// Service is the daemon's service run inside this process: the same
// daemon.Daemon and API server that `agentbox serve` runs, served on a
// Listener that only this process can dial, with its own state (one run
// directory) and a libvirt connection whose domains die with the process
// (autodestroy, unless Config.Keep). Fronts talk to it through Client
// exactly as to a daemon on a socket.
type Service struct {
	// Client reaches the service; Close closes it.
	Client *client.Client

	run    *runDir
	conn   *libvirt.Conn
	daemon *daemon.Daemon
	server *apiserver.Server
	ln     *Listener
	served chan error
	uri    string
	keep   bool // Config.Keep
}

// Start sweeps what killed in-process runs left (telling cfg.OnSweep),
// then makes and locks the run's state directories and starts the
// service. The service's sandboxes are not bound to ctx; Close ends them.
// A connection failure says how to start libvirtd; on any error, what
// Start made is undone.
func Start(ctx context.Context, cfg Config) (_ *Service, err error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	stateDir, err := filepath.Abs(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	runtimeDir, err := filepath.Abs(cfg.RuntimeDir)
	if err != nil {
		return nil, err
	}
	s := &Service{uri: cfg.URI, keep: cfg.Keep}
	undo := revert.New()
	defer undo.OnError(ctx, &err)
	s.conn, err = libvirt.Connect(ctx, libvirt.Config{URI: s.uri, Socket: cfg.LibvirtSocket, Logger: logger})
	if err != nil {
		return nil, libvirt.ConnectError(s.uri, err)
	}
	undo.Add("libvirt connection", func(context.Context) error { return s.conn.Close() })
	for _, line := range Sweep(ctx, stateDir, libvirt.NewDriver(s.conn)) {
		if cfg.OnSweep != nil {
			cfg.OnSweep(line)
		}
	}

	if s.run, err = newRunDir(stateDir, runtimeDir, cfg.RunID); err != nil {
		return nil, err
	}
	undo.Add("run state", func(context.Context) error { return s.run.Close(false) })
	var drvOpts []libvirt.DriverOption
	if !cfg.Keep {
		drvOpts = append(drvOpts, libvirt.WithAutoDestroy())
	}
	makeNetwork := cfg.Network
	if makeNetwork == nil {
		makeNetwork = func() (sandbox.NetworkProvider, error) { return NewNetwork(logger) }
	}
	s.daemon, err = daemon.New(ctx, daemon.Config{
		Driver:     libvirt.NewDriver(s.conn, drvOpts...),
		StateDir:   s.run.Dir,
		RuntimeDir: s.run.RuntimeDir,
		Logger:     logger,
		Version:    cfg.Version,
		Accel: func(m accel.Mode) (accel.Choice, error) {
			choice, err := accel.Choose(m, nil)
			if err == nil && cfg.OnAccel != nil {
				cfg.OnAccel(m, choice)
			}
			return choice, err
		},
		// Held to the host's capacity as the daemon is (its defaults:
		// the host's memory minus 1 GiB, 4 vCPUs per host CPU), so a
		// request the host cannot hold is refused at once with the
		// numbers instead of failing in QEMU or timing out in the boot.
		// One run, one sandbox: no usage thresholds, as for a VM
		// started by hand.
		CapacityHint:        "ask for less with --cpus/--memory (an in-process run is held to the host's capacity as `agentbox serve` is)",
		Thresholds:          daemon.Thresholds{WarnPercent: -1, ActPercent: -1},
		Network:             &lazyNetwork{make: makeNetwork},
		ImageVerifyCacheDir: filepath.Join(stateDir, "image-verify"),
		GuestAgentChannel:   cfg.GuestAgentChannel,
	})
	if err != nil {
		return nil, err
	}
	undo.Add("service", s.daemon.Shutdown)
	// The server's request log would repeat each error the front reports
	// itself: only at debug level is it wanted.
	var srvLog *slog.Logger
	if logger.Enabled(ctx, slog.LevelDebug) {
		srvLog = logger
	}
	s.server, err = apiserver.NewServer(apiserver.Config{Backend: s.daemon, Logger: srvLog})
	if err != nil {
		return nil, err
	}
	s.ln = NewListener()
	s.served = make(chan error, 1)
	go func() { s.served <- s.server.Serve(s.ln) }()
	s.Client = client.New("", client.WithHTTPClient(&http.Client{Transport: &http.Transport{
		DialContext:        s.ln.DialContext,
		DisableCompression: true,
	}}))
	return s, nil
}

// Kept says how to reach and remove a sandbox that Service.Keep left
// running after the process.
type Kept struct {
	// Sandbox is the kept sandbox.
	Sandbox api.Sandbox
	// AgentSocket, ConsoleLog and Overlay are its host paths (agent
	// socket, console log, qcow2 overlay).
	AgentSocket, ConsoleLog, Overlay string
	// Inspect is the shell command that shows its domain
	// (virsh dominfo).
	Inspect string
	// Remove is the shell command that destroys its domain and removes
	// the run's state and runtime dirs.
	Remove string
	// MarkErr is why the run could not be marked kept (then the next
	// sweep removes its files while the domain runs); nil when marked.
	MarkErr error
}

// Keep marks the run's state kept (no sweep removes it) and returns how
// to reach and remove sb, a sandbox of this service left running (by
// Config.Keep, whose domains outlive the process). The error says that
// sb's record is gone (then nothing is marked).
func (s *Service) Keep(sb api.Sandbox) (Kept, error) {
	rec, err := s.daemon.Record(sb.ID)
	if err != nil {
		return Kept{}, fmt.Errorf("sandbox %s kept running, but its record is gone: %w", sb.ID, err)
	}
	k := Kept{
		Sandbox:     sb,
		AgentSocket: rec.AgentSocket,
		ConsoleLog:  rec.ConsoleLog,
		Overlay:     rec.Overlay,
		Inspect:     fmt.Sprintf("virsh -c %s dominfo %s", s.uri, sb.Domain),
		Remove:      fmt.Sprintf("virsh -c %s destroy %s && rm -rf %s %s", s.uri, sb.Domain, s.run.Dir, s.run.RuntimeDir),
	}
	if err := s.run.Keep(k.Remove); err != nil {
		k.MarkErr = fmt.Errorf("mark run %s kept: %w", s.run.ID, err)
	}
	return k, nil
}

// shutdownTimeout bounds the service's shutdown (requests still in
// flight, e.g. a create reverting after an interrupt).
const shutdownTimeout = 2 * time.Minute

// Close stops the service (Client, then the API server, waiting for the
// requests in flight), removes the sandboxes still there unless
// Config.Keep (their domains would die with the libvirt connection
// anyway, leaving their overlays and records behind: a front such as
// `agentbox mcp --local` ends with its sandboxes still running), stops the
// daemon (a kept sandbox keeps running), closes the libvirt connection
// (autodestroy ends any domain still there) and removes the run's state
// and runtime dirs unless a sandbox is left (kept, or a removal failed:
// then the next sweep removes it). It runs under
// context.WithoutCancel(ctx), bounded to two minutes, and joins the
// errors of every step.
func (s *Service) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	s.Client.Close()
	err := s.server.Shutdown(ctx)
	err = errors.Join(err, <-s.served)
	left, lerr := s.daemon.ListSandboxes(ctx, nil, "")
	if !s.keep && lerr == nil {
		for _, sb := range left {
			if rerr := s.daemon.DeleteSandbox(ctx, sb.ID, true); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove sandbox %s: %w", sb.ID, rerr))
			}
		}
		left, lerr = s.daemon.ListSandboxes(ctx, nil, "")
	}
	err = errors.Join(err, s.daemon.Shutdown(ctx), s.conn.Close())
	return errors.Join(err, s.run.Close(lerr != nil || len(left) > 0))
}
