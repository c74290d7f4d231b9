package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/revert"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// Host is a running agentbox service: the daemon (vmctl/daemon) on a
// libvirt connection with its network, policy plugin and cluster
// membership, and the fronts that serve it (the REST API, MCP, E2B) on
// their listeners. Everything it started is on one revert list, undone
// newest first by Shutdown, or by Start itself when a step fails.
type Host struct {
	// Client reaches a local host's API over its in-memory listener
	// (Options.Local); nil for serve, whose clients dial its socket.
	Client *client.Client

	o        Options
	log      *slog.Logger
	undo     *revert.List
	stateDir string

	conn      *libvirt.Conn
	closeConn func() error // conn.Close, once
	daemon    *daemon.Daemon
	server    *apiserver.Server
	front     *e2bFront
	listeners []net.Listener // serve's (Listen)
	errc      chan error     // serve's listener failures
	waitErr   error          // what Wait returned

	run       *runDir // a local host's
	keepFiles bool    // a local host's run dir outlives it (a sandbox is left)
}

// Start starts the host of o: for serve, in this order, the listeners
// (Listen), the templates (o.Templates), the libvirt connection, the
// sweep of killed in-process runs, the network, the policy plugin, the
// daemon (whose start-up reconciliation adopts, fails or cleans up the
// sandboxes it finds), the cluster membership, the API server, MCP and
// the E2B front; then o.OnReady, and it serves the listeners, tells
// systemd it is ready and pings its watchdog until ctx ends. A local
// host (o.Local) makes the connection, the sweep, the run's state, the
// daemon, the API server and Client. The sandboxes are not bound to ctx;
// Shutdown ends the host. A connection failure says how to start
// libvirtd. On any error, what Start made is undone, newest first, and
// the undo errors are joined to the step's.
func Start(ctx context.Context, o Options) (_ *Host, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	stateDir, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, err
	}
	runtimeDir, err := filepath.Abs(o.RuntimeDir)
	if err != nil {
		return nil, err
	}
	h := &Host{o: o, log: log, undo: revert.New(), stateDir: stateDir}
	defer h.undo.OnError(ctx, &err)
	if o.Local != nil {
		err = h.startLocal(ctx, stateDir, runtimeDir) // local.go
	} else {
		err = h.startServe(ctx, stateDir, runtimeDir)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// startServe is Start for serve (see there).
func (h *Host) startServe(ctx context.Context, stateDir, runtimeDir string) error {
	o, log := h.o, h.log
	if err := distinctSecrets(o.Auth, o.Cluster != nil); err != nil {
		return err
	}
	ls, err := Listen(o)
	if err != nil {
		return err
	}
	h.listeners = ls
	h.undo.Add("listeners", func(context.Context) error {
		for _, l := range ls {
			l.Close() // closed already by the API server's Shutdown once served
		}
		return nil
	})
	var templates []daemon.Template
	if o.Templates != nil {
		if templates, err = o.Templates(ctx); err != nil {
			return err
		}
	}
	if err := h.connect(ctx); err != nil {
		return err
	}
	h.undo.Add("libvirt connection", func(context.Context) error {
		h.closeConn() // as serve did: its error is not the daemon's
		return nil
	})
	h.sweep(ctx, stateDir)

	egressAud := &egressAudit{}
	netw, releaseNet := serveNetwork(o.Network, log, stateDir, egressAud) // network.go
	if releaseNet != nil {
		h.undo.Add("network", func(context.Context) error { releaseNet(); return nil })
	}
	pol, closePolicy, err := startPolicy(o.Policy, log) // policy.go
	if err != nil {
		return err
	}
	if closePolicy != nil {
		h.undo.Add("policy plugin", func(context.Context) error { closePolicy(); return nil })
	}
	reg := prometheus.NewRegistry()
	cfg := h.daemonConfig(stateDir, runtimeDir)
	cfg.Network, cfg.Policy, cfg.Templates, cfg.Registerer = netw, pol, templates, reg
	cfg.TenantPrivateNetworks = o.Network.TenantPrivate // serve --tenant-private-networks
	d, err := daemon.New(ctx, cfg)
	if err != nil {
		return err
	}
	h.daemon = d
	h.undo.Add("daemon", d.Shutdown)
	egressAud.set(d.AuditEgress)
	router, leaveCluster, err := joinCluster(ctx, o.Cluster, o.Auth, d, log, h.say) // cluster.go
	if err != nil {
		return err
	}
	if leaveCluster != nil {
		h.undo.Add("cluster", leaveCluster)
	}
	// The one keyring of every front (vmctl/auth): admin, tenants, peers.
	keys := keyring(o.Auth, router != nil) // auth.go

	apiCfg := apiserver.Config{
		Logger:     log,
		Backend:    d,
		Router:     router,
		Registerer: reg,
		Metrics:    promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
	}
	apiAuth(o.Auth, keys, &apiCfg) // auth.go
	if h.server, err = apiserver.NewServer(apiCfg); err != nil {
		return err
	}
	h.undo.Add("API server", h.server.Shutdown)
	closeMCP, err := startMCP(o.MCP, h.server) // fronts.go
	if err != nil {
		return err
	}
	if closeMCP != nil {
		h.undo.Add("MCP", func(context.Context) error { return closeMCP() })
	}
	if h.front, err = newE2BFront(o.E2B, keys, h.server, templates, stateDir, log, h.say); err != nil {
		return err
	}
	if h.front != nil {
		h.undo.Add("E2B front", h.front.shutdown)
	}

	if o.OnReady != nil {
		o.OnReady(h)
	}
	rep := d.Report()
	log.Info("agentbox serve ready", "socket", o.Socket, "tcp", o.ListenTCP, "state_dir", stateDir,
		"instance", d.Instance(), "adopted", len(rep.Adopted), "failed", len(rep.Failed), "cleaned", len(rep.Cleaned))
	h.errc = make(chan error, len(ls)+1)
	for _, l := range ls {
		go func() { h.errc <- h.server.Serve(l) }()
	}
	h.front.serve(h.errc)
	sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	go watchdog(ctx, d)
	return nil
}

// daemonConfig is the daemon's configuration from h's Options, without
// what Start makes on the way (network, policy, templates, registry).
// A new daemon setting is copied here.
func (h *Host) daemonConfig(stateDir, runtimeDir string) daemon.Config {
	o := h.o
	return daemon.Config{
		Driver:            libvirt.NewDriver(h.conn),
		StateDir:          stateDir,
		RuntimeDir:        runtimeDir,
		Logger:            h.log,
		Version:           o.Version,
		Node:              o.Node,
		CapacityMemoryMiB: o.CapacityMemoryMiB,
		CapacityVCPUs:     o.CapacityVCPUs,
		TCGCacheMiB:       o.TCGCacheMiB,
		Defaults:          o.Defaults,
		StopOnShutdown:    o.StopOnExit,
		WarmPool:          o.WarmPool,
		WarmTemplates:     o.WarmTemplates,
		WarmMode:          o.WarmMode,
		AuditMaxBytes:     o.AuditMaxBytes,
		AuditMaxFiles:     o.AuditMaxFiles,
		AuditFullTty:      o.AuditFullTty,
		Ceilings:          o.Ceilings,
		Thresholds:        o.Thresholds,
		UsageInterval:     o.UsageInterval,
		Tenants:           o.Auth.Tenants,
		Quotas:            clusterQuotas(o.Cluster, o.Auth.Tenants), // cluster.go
		QEMUUsers:         o.QEMUUsers,
		ReservedPorts:     reservedPorts(o),
	}
}

// connect opens the libvirt connection of h's Options; closeConn closes
// it on its first call (and returns its error), later calls do nothing.
func (h *Host) connect(ctx context.Context) error {
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: h.o.URI, Socket: h.o.LibvirtSocket, Logger: h.log})
	if err != nil {
		return libvirt.ConnectError(h.o.URI, err)
	}
	h.conn = conn
	var once sync.Once
	h.closeConn = func() (err error) {
		once.Do(func() { err = conn.Close() })
		return err
	}
	return nil
}

// sweep removes what killed in-process runs under stateDir left
// (Sweep), saying each line.
func (h *Host) sweep(ctx context.Context, stateDir string) {
	for _, line := range Sweep(ctx, stateDir, libvirt.NewDriver(h.conn)) {
		h.say(line)
	}
}

// say tells Options.Say line, if set.
func (h *Host) say(line string) {
	if h.o.Say != nil {
		h.o.Say(line)
	}
}

// StateDir returns the absolute state dir of the host's daemon (a local
// host's run directory).
func (h *Host) StateDir() string {
	if h.run != nil {
		return h.run.Dir
	}
	return h.stateDir
}

// Report returns what the daemon's start-up reconciliation did.
func (h *Host) Report() sandbox.Report { return h.daemon.Report() }

// E2BAddr returns the E2B front's address, "" without one.
func (h *Host) E2BAddr() string { return h.front.addr() }

// Wait blocks until ctx ends (serve's SIGTERM or SIGINT: it logs
// "shutting down") or one of serve's listeners fails (it logs that
// failure and returns it; Shutdown returns it too). Then the caller
// calls Shutdown.
func (h *Host) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		h.log.Info("shutting down", "timeout", h.o.ShutdownTimeout)
	case h.waitErr = <-h.errc:
		h.log.Error("API listener failed", "err", h.waitErr)
	}
	return h.waitErr
}

// DefaultLocalShutdownTimeout bounds a local host's Shutdown when
// Options.ShutdownTimeout is 0 (requests still in flight, e.g. a create
// reverting after an interrupt).
const DefaultLocalShutdownTimeout = 2 * time.Minute

// Shutdown ends the host: it undoes Start's revert list, newest first,
// under context.WithoutCancel(ctx) bounded by Options.ShutdownTimeout,
// and joins the errors of every step with Wait's. For serve, after
// telling systemd it is stopping: the E2B front stops accepting and
// lets its requests finish, then the MCP sessions end, the API server
// stops accepting and lets its requests finish (event streams end at
// once), the node leaves the cluster, the daemon shuts down (sandboxes
// keep running unless StopOnExit), the policy plugin stops, the
// network table is released and the libvirt connection closed; when the
// timeout cut requests it logs so and that is no error. For a local
// host: Client closes, the API server stops (waiting for the requests
// in flight), the sandboxes still there are removed unless Keep (their
// domains would die with the connection anyway, leaving their overlays
// and records behind), the daemon shuts down (a kept sandbox keeps
// running), the libvirt connection closes (autodestroy ends any domain
// still there) and the run's state and runtime dirs are removed unless
// a sandbox is left (kept, or a removal failed: then the next sweep
// removes it).
func (h *Host) Shutdown(ctx context.Context) error {
	timeout := h.o.ShutdownTimeout
	if h.o.Local != nil && timeout == 0 {
		timeout = DefaultLocalShutdownTimeout
	}
	if h.o.Local == nil {
		sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	err := errors.Join(h.waitErr, h.undo.Unwind(ctx))
	if h.o.Local == nil && errors.Is(err, context.DeadlineExceeded) {
		h.log.Warn("shutdown deadline reached; remaining requests were cut")
		err = nil
	}
	return err
}

// Close is Shutdown, for a local host's caller (run --local, mcp --local).
func (h *Host) Close(ctx context.Context) error { return h.Shutdown(ctx) }

// watchdog pings systemd's watchdog (WatchdogSec=) at half its interval
// while the daemon answers, until ctx ends. Without a watchdog it returns.
func watchdog(ctx context.Context, d *daemon.Daemon) {
	interval, err := sddaemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := d.Info(ctx); err == nil {
				sddaemon.SdNotify(false, sddaemon.SdNotifyWatchdog)
			}
		}
	}
}
