package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/revert"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// localService is the daemon's service run inside this process, for an
// in-process `agentbox run`: the same daemon.Daemon and API server that
// `agentbox serve` runs, served on an in-memory listener that only this
// process can dial, with its own state (localRun) and a libvirt
// connection whose domains die with the process (autodestroy, unless
// --keep). The CLI talks to it through vmctl/client exactly as to a
// daemon on a socket.
type localService struct {
	run    *localRun
	conn   *libvirt.Conn
	daemon *daemon.Daemon
	server *apiserver.Server
	ln     *memListener
	served chan error
	uri    string
	// Client reaches the service.
	Client *client.Client
}

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

// startLocal sweeps what killed in-process runs left (saying so on
// stderr), then starts the in-process service from the global flags.
func startLocal(ctx context.Context, c *cli.Context, o localOptions) (_ *localService, err error) {
	logger, err := newLogger(c.String("log-level"))
	if err != nil {
		return nil, err
	}
	stateDir, err := filepath.Abs(c.String("state-dir"))
	if err != nil {
		return nil, err
	}
	runtimeDir, err := filepath.Abs(c.String("runtime-dir"))
	if err != nil {
		return nil, err
	}
	s := &localService{uri: c.String("uri")}
	undo := revert.New()
	defer undo.OnError(ctx, &err)
	s.conn, err = libvirt.Connect(ctx, libvirt.Config{URI: s.uri, Socket: c.String("libvirt-socket"), Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("connect to libvirt at %s: %w (is libvirtd running? start it with `libvirtd -d` or `systemctl start libvirtd`)", s.uri, err)
	}
	undo.Add("libvirt connection", func(context.Context) error { return s.conn.Close() })
	for _, line := range sweepLocalRuns(ctx, stateDir, libvirt.NewDriver(s.conn)) {
		fmt.Fprintln(c.App.ErrWriter, "agentbox:", line)
	}

	if s.run, err = newLocalRun(stateDir, runtimeDir, o.RunID); err != nil {
		return nil, err
	}
	undo.Add("run state", func(context.Context) error { return s.run.Close(false) })
	var drvOpts []libvirt.DriverOption
	if !o.Keep {
		drvOpts = append(drvOpts, libvirt.WithAutoDestroy())
	}
	errw := c.App.ErrWriter
	s.daemon, err = daemon.New(ctx, daemon.Config{
		Driver:     libvirt.NewDriver(s.conn, drvOpts...),
		StateDir:   s.run.Dir,
		RuntimeDir: s.run.RuntimeDir,
		Logger:     logger,
		Version:    version,
		Accel: func(m accel.Mode) (accel.Choice, error) {
			choice, err := accel.Choose(m, nil)
			// Say which accelerator --accel auto chose: always with -v,
			// and on a terminal (a person wonders why TCG is slow; a
			// script's stderr stays the command's own).
			if err == nil && (o.Verbose || (m == accel.ModeAuto && isTerminal(os.Stderr))) {
				fmt.Fprintf(errw, "agentbox: accelerator %s (%s)\n", choice.Accel, choice.Reason)
			}
			return choice, err
		},
		// One run, one sandbox: no admission control and no usage
		// thresholds, as for a VM started by hand.
		CapacityMemoryMiB:   math.MaxInt32,
		CapacityVCPUs:       math.MaxInt32,
		Thresholds:          daemon.Thresholds{WarnPercent: -1, ActPercent: -1},
		Network:             &lazyNetwork{make: func() (sandbox.NetworkProvider, error) { return localNetwork(logger) }},
		ImageVerifyCacheDir: filepath.Join(stateDir, "image-verify"),
		GuestAgentChannel:   o.GuestAgentChannel,
	})
	if err != nil {
		return nil, err
	}
	undo.Add("service", s.daemon.Shutdown)
	// The server's request log would repeat on stderr each error the CLI
	// reports itself: only at debug level is it wanted.
	var srvLog *slog.Logger
	if logger.Enabled(ctx, slog.LevelDebug) {
		srvLog = logger
	}
	s.server, err = apiserver.NewServer(apiserver.Config{Backend: s.daemon, Logger: srvLog})
	if err != nil {
		return nil, err
	}
	s.ln = newMemListener()
	s.served = make(chan error, 1)
	go func() { s.served <- s.server.Serve(s.ln) }()
	s.Client = client.New("", client.WithHTTPClient(&http.Client{Transport: &http.Transport{
		DialContext:        s.ln.DialContext,
		DisableCompression: true,
	}}))
	return s, nil
}

// Keep marks the run's state kept (no sweep removes it) and tells the
// user how to reach and remove the sandbox sb left running by --keep.
func (s *localService) Keep(w io.Writer, sb api.Sandbox) {
	rec, err := s.daemon.Record(sb.ID)
	if err != nil {
		fmt.Fprintf(w, "agentbox: sandbox %s kept running, but its record is gone: %v\n", sb.ID, err)
		return
	}
	remove := fmt.Sprintf("virsh -c %s destroy %s && rm -rf %s %s", s.uri, sb.Domain, s.run.Dir, s.run.RuntimeDir)
	if err := s.run.Keep(remove); err != nil {
		fmt.Fprintf(w, "agentbox: mark run %s kept: %v\n", s.run.ID, err)
	}
	fmt.Fprintf(w, `agentbox: sandbox %s kept running (domain %s, %s)
  agent socket: %s
  console log:  %s
  overlay:      %s
  exec:         agentbox exec --agent-socket %s -- COMMAND [ARG...]
  inspect:      virsh -c %s dominfo %s
  remove:       %s
`, sb.ID, sb.Domain, sb.Accel, rec.AgentSocket, rec.ConsoleLog, rec.Overlay, rec.AgentSocket, s.uri, sb.Domain, remove)
}

// localShutdownTimeout bounds the in-process service's shutdown (requests
// still in flight, e.g. a create reverting after an interrupt).
const localShutdownTimeout = 2 * time.Minute

// Close stops the service (the API server, then the daemon: a kept
// sandbox keeps running), closes the libvirt connection (autodestroy ends
// any domain still there) and removes the run's state unless a sandbox
// is left (kept, or a teardown failed: then the next sweep removes it).
func (s *localService) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), localShutdownTimeout)
	defer cancel()
	s.Client.Close()
	err := s.server.Shutdown(ctx)
	err = errors.Join(err, <-s.served)
	left, lerr := s.daemon.ListSandboxes(ctx, nil, "")
	err = errors.Join(err, s.daemon.Shutdown(ctx), s.conn.Close())
	return errors.Join(err, s.run.Close(lerr != nil || len(left) > 0))
}

// memListener is a net.Listener with no address in the file system: each
// DialContext makes a connected unix socket pair (socketpair(2)), hands
// one end to Accept and returns the other. Only this process can reach
// it; being unix sockets, its connections name their peer by uid like
// the daemon's socket does.
type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newMemListener() *memListener {
	return &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// memAddr is a memListener's address: network "unix" (the API server
// serves it like its socket, without a token), no path.
var memAddr = &net.UnixAddr{Name: "in-process", Net: "unix"}

// Accept implements net.Listener.
func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; dials fail afterwards.
func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *memListener) Addr() net.Addr { return memAddr }

// DialContext connects to the listener (an http.Transport's DialContext;
// network and address are ignored).
func (l *memListener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("in-process service: socketpair: %w", err)
	}
	server, err := fdConn(fds[0], "in-process-server")
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	cl, err := fdConn(fds[1], "in-process-client")
	if err != nil {
		server.Close()
		return nil, err
	}
	select {
	case l.conns <- server:
		return cl, nil
	case <-l.done:
		err = fmt.Errorf("in-process service: %w", net.ErrClosed)
	case <-ctx.Done():
		err = ctx.Err()
	}
	server.Close()
	cl.Close()
	return nil, err
}

// fdConn wraps a socket file descriptor in a net.Conn (taking it over).
func fdConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("in-process service: %w", err)
	}
	return c, nil
}

// lazyNetwork makes the in-process network provider on first use: only a
// sandbox whose policy needs a network needs root and nf_tables. Its
// Sweep removes nothing: the table is shared by every in-process run on
// the host, and the other runs' sandboxes are not this service's to
// judge.
type lazyNetwork struct {
	make func() (sandbox.NetworkProvider, error)
	mu   sync.Mutex
	p    sandbox.NetworkProvider // nil until made
}

var _ sandbox.NetworkProvider = (*lazyNetwork)(nil)

// get returns the provider, making it if need be; a failure is retried
// by the next call.
func (n *lazyNetwork) get() (sandbox.NetworkProvider, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		p, err := n.make()
		if err != nil {
			return nil, err
		}
		n.p = p
	}
	return n.p, nil
}

// Setup implements sandbox.NetworkProvider.
func (n *lazyNetwork) Setup(ctx context.Context, id string, policy netpolicy.Policy) (network.Attachment, error) {
	p, err := n.get()
	if err != nil {
		return network.Attachment{}, err
	}
	return p.Setup(ctx, id, policy)
}

// Adopt implements sandbox.NetworkProvider.
func (n *lazyNetwork) Adopt(ctx context.Context, id string, att network.Attachment, policy netpolicy.Policy) error {
	p, err := n.get()
	if err != nil {
		return err
	}
	return p.Adopt(ctx, id, att, policy)
}

// Teardown implements sandbox.NetworkProvider; without a provider made
// there is nothing to tear down.
func (n *lazyNetwork) Teardown(ctx context.Context, id string) error {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Teardown(ctx, id)
}

// Sweep implements sandbox.NetworkProvider: it removes nothing (see
// lazyNetwork).
func (n *lazyNetwork) Sweep(context.Context, func(string) bool) ([]string, error) {
	return nil, nil
}
