package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/inprocess"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the agentbox daemon: REST API on a unix socket, long-lived sandboxes",
		Description: "Serves the REST API (/v1, see vmctl/api/openapi.yaml) on the unix socket --socket, and on TCP with\n" +
			"--listen-tcp (which needs the global --token-file, whose token TCP clients must send, or --tls-cert/--tls-key). State (store, audit log, overlays,\n" +
			"console logs) lives in --state-dir. On start the daemon reconciles its records with libvirt: sandboxes\n" +
			"whose domains still run are adopted, those whose domain vanished are marked failed, and domains of\n" +
			"this daemon that no record knows are destroyed. On SIGTERM or SIGINT it stops accepting, lets\n" +
			"running commands finish for --shutdown-timeout, and leaves sandboxes running for the next daemon\n" +
			"(or stops them with --stop-on-exit). Under systemd it reports readiness and watchdog pings\n" +
			"(sd_notify) and accepts socket activation.",
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "socket-group", Usage: "group `NAME|GID` that may use the unix socket (mode 0660)", EnvVars: []string{"AGENTBOX_SOCKET_GROUP"}},
			&cli.StringFlag{Name: "listen-tcp", Usage: "also serve the API on TCP `ADDR` (host:port); needs --token-file or TLS"},
			&cli.StringFlag{Name: "tls-cert", Usage: "TLS certificate `FILE` (PEM) for --listen-tcp"},
			&cli.StringFlag{Name: "tls-key", Usage: "TLS private key `FILE` (PEM) for --listen-tcp"},
			&cli.StringFlag{Name: "tls-client-ca", Usage: "require TCP clients to present a certificate signed by this CA `FILE` (PEM)"},
			&cli.IntFlag{Name: "capacity-memory", Usage: "guest memory in `MiB` the daemon may commit in total", DefaultText: "host memory - 1 GiB"},
			&cli.IntFlag{Name: "capacity-vcpus", Usage: "vCPUs the daemon may commit in total", DefaultText: "4 × host CPUs"},
			&cli.DurationFlag{Name: "default-ttl", Usage: "remove sandboxes this long after creation unless they ask otherwise (0: never)"},
			&cli.DurationFlag{Name: "default-idle-timeout", Usage: "remove sandboxes idle this long unless they ask otherwise (0: never)"},
			&cli.DurationFlag{Name: "default-exec-timeout", Usage: "kill commands after this long unless they ask otherwise (0: never)"},
			&cli.IntFlag{Name: "default-max-execs", Usage: "most commands a sandbox may run unless it asks otherwise (0: no limit)"},
			&cli.BoolFlag{Name: "stop-on-exit", Usage: "stop all sandboxes when the daemon exits (default: leave them for the next daemon)"},
			&cli.IntFlag{Name: "warm-pool", Usage: "keep `N` sandboxes per warm template restored and paused, so `create --warm` only resumes one; refilled at start for recently used templates (each holds its memory on the host, is not listed by `ls` and not counted against --capacity-*; `agentbox warm ls` shows them)"},
			&cli.StringFlag{Name: "warm-mode", Value: string(warm.ModeMemory), Usage: "how warm templates are made: `memory` (RAM in a file clones map copy-on-write, only the device state loaded per create) or snapshot (a whole-RAM internal snapshot copied and loaded per create, the earlier mechanism)"},
			&cli.IntFlag{Name: "warm-templates", Value: 8, Usage: "keep at most `N` warm templates (one per image and shape); building another removes the least recently used"},
			&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, Usage: "on SIGTERM, let running commands finish for this long"},
			&cli.Int64Flag{Name: "audit-max-bytes", Value: 64 << 20, Usage: "rotate the audit log at this many `BYTES`"},
			&cli.IntFlag{Name: "audit-max-files", Value: 10, Usage: "rotated audit log files to keep"},
			&cli.BoolFlag{Name: "audit-full-tty", Usage: "keep every key typed into a terminal session (`exec -it`) in its audit entry, up to 1 MiB, not just the first KiB"},
			templateFlag, // templates.go
		}, append(append(append(networkFlags(), resourceServeFlags()...), serveMCPFlags()...), append(append(append(serveE2BFlags(), servePolicyFlags()...), serveTenantFlags()...), append(append(serveQEMUUserFlags(), serveClusterFlags()...), serveClusterProxyFlags()...)...)...)...),
		OnUsageError: usageError,
		Action:       serveAction,
	}
}

// serveAction implements `agentbox serve`.
func serveAction(c *cli.Context) error {
	if err := applyConfig(c); err != nil {
		return err
	}
	if c.Args().Present() {
		return fmt.Errorf("serve takes no arguments, got %q", c.Args().Slice())
	}
	logger, err := newLogger(c.String("log-level"))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	stateDir, err := filepath.Abs(c.String("state-dir"))
	if err != nil {
		return err
	}
	runtimeDir, err := filepath.Abs(c.String("runtime-dir"))
	if err != nil {
		return err
	}
	apiCfg := apiserver.Config{Logger: logger}
	if f := c.String("token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		apiCfg.Token = string(b)
	}
	if apiCfg.TLS, err = serverTLS(c); err != nil {
		return err
	}
	if apiCfg.Tenants, err = serveTenants(c, apiCfg.Token); err != nil { // tenants.go
		return err
	}
	warmMode, err := warm.ParseMode(c.String("warm-mode"))
	if err != nil {
		return usageError(c, err, false)
	}
	clusterCfg, err := serveClusterConfig(c) // cluster.go
	if err != nil {
		return usageError(c, err, false)
	}
	tcpAddr := c.String("listen-tcp")
	if tcpAddr != "" {
		if err := apiserver.CheckTCP(apiCfg, tcpAddr); err != nil {
			return err
		}
	}

	// Listeners first: a second daemon on the same socket fails before it
	// touches libvirt or the store.
	listeners, err := serveListeners(c, tcpAddr)
	if err != nil {
		return err
	}
	closeAll := func() {
		for _, l := range listeners {
			l.Close()
		}
	}
	if c.Bool("network-cleanup") {
		defer closeAll()
		return networkCleanup(c) // servenet.go
	}

	templates, err := serveTemplates(ctx, c) // templates.go
	if err != nil {
		closeAll()
		return err
	}
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: c.String("uri"), Socket: c.String("libvirt-socket"), Logger: logger})
	if err != nil {
		closeAll()
		return libvirt.ConnectError(c.String("uri"), err)
	}
	defer conn.Close()
	for _, line := range inprocess.Sweep(ctx, stateDir, libvirt.NewDriver(conn)) {
		fmt.Fprintln(c.App.ErrWriter, "agentbox serve:", line)
	}

	egressAud := &egressAudit{} // servesecrets.go
	netw, closeNet, err := newNetwork(c, logger, stateDir, egressAud)
	if err != nil {
		closeAll()
		return err
	}
	defer closeNet()
	pol, closePolicy, err := servePolicy(c, logger) // policy.go
	if err != nil {
		closeAll()
		return err
	}
	defer closePolicy()
	qemuIDs, err := qemuUsers(c) // qemuuser.go
	if err != nil {
		closeAll()
		return err
	}
	reg := prometheus.NewRegistry()
	ceilings, thresholds, usageInterval := daemonResources(c) // resources.go
	d, err := daemon.New(ctx, daemon.Config{
		Driver:            libvirt.NewDriver(conn),
		StateDir:          stateDir,
		RuntimeDir:        runtimeDir,
		Logger:            logger,
		Version:           version,
		Node:              c.String("node"), // cluster.go: "" without --cluster
		CapacityMemoryMiB: c.Int("capacity-memory"),
		CapacityVCPUs:     c.Int("capacity-vcpus"),
		TCGCacheMiB:       c.Int("tcg-cache"),
		Defaults: api.Limits{
			TTLSeconds:         int64(c.Duration("default-ttl").Seconds()),
			IdleTimeoutSeconds: int64(c.Duration("default-idle-timeout").Seconds()),
			ExecTimeoutMs:      c.Duration("default-exec-timeout").Milliseconds(),
			MaxExecs:           c.Int("default-max-execs"),
		},
		StopOnShutdown: c.Bool("stop-on-exit"),
		WarmPool:       c.Int("warm-pool"),
		WarmTemplates:  c.Int("warm-templates"),
		WarmMode:       warmMode,
		AuditMaxBytes:  c.Int64("audit-max-bytes"),
		AuditMaxFiles:  c.Int("audit-max-files"),
		AuditFullTty:   c.Bool("audit-full-tty"),
		Registerer:     reg,
		Network:        netw,
		Ceilings:       ceilings,
		Thresholds:     thresholds,
		UsageInterval:  usageInterval,
		Templates:      templates,
		Policy:         pol,
		Tenants:        apiCfg.Tenants,
		Quotas:         serveQuotas(clusterCfg, apiCfg.Tenants), // cluster.go
		QEMUUsers:      qemuIDs,
	})
	if err != nil {
		closeAll()
		return err
	}
	egressAud.set(d.AuditEgress)
	// The one keyring of every front (vmctl/auth): admin, tenants, peers.
	router, keys, leaveCluster, err := serveCluster(ctx, c, clusterCfg, d, auth.Config{Admin: apiCfg.Token, Tenants: apiCfg.Tenants}, logger) // cluster.go
	if err != nil {
		closeAll()
		d.Shutdown(context.Background())
		return err
	}
	apiCfg.Backend, apiCfg.Router, apiCfg.Keyring = d, router, keys
	apiCfg.Registerer = reg
	apiCfg.Metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	srv, err := apiserver.NewServer(apiCfg)
	if err != nil {
		closeAll()
		leaveCluster(context.Background())
		d.Shutdown(context.Background())
		return err
	}
	closeMCP, err := serveMCP(c, srv, logger) // mcp.go
	if err != nil {
		closeAll()
		leaveCluster(context.Background())
		d.Shutdown(context.Background())
		return err
	}
	front, err := serveE2B(c, srv, templates, stateDir, keys, logger) // e2b.go
	if err != nil {
		closeAll()
		closeMCP()
		leaveCluster(context.Background())
		d.Shutdown(context.Background())
		return err
	}
	rep := d.Report()
	where := c.String("socket")
	if tcpAddr != "" {
		where += " and " + tcpAddr
	}
	if front != nil {
		where += ", E2B API on " + front.addr()
	}
	fmt.Fprintf(c.App.ErrWriter, "agentbox serve: listening on %s (state %s); %d sandboxes known, %d adopted, %d failed, %d leftovers cleaned\n",
		where, stateDir, rep.Loaded, len(rep.Adopted), len(rep.Failed), len(rep.Cleaned))
	logger.Info("agentbox serve ready", "socket", c.String("socket"), "tcp", tcpAddr, "state_dir", stateDir,
		"instance", d.Instance(), "adopted", len(rep.Adopted), "failed", len(rep.Failed), "cleaned", len(rep.Cleaned))

	errc := make(chan error, len(listeners)+1)
	for _, l := range listeners {
		go func() { errc <- srv.Serve(l) }()
	}
	front.serve(errc)
	sddaemon.SdNotify(false, sddaemon.SdNotifyReady)
	go watchdog(ctx, d)

	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "timeout", c.Duration("shutdown-timeout"))
	case serveErr = <-errc:
		logger.Error("API listener failed", "err", serveErr)
	}
	stop()
	sddaemon.SdNotify(false, sddaemon.SdNotifyStopping)
	shutCtx, cancel := context.WithTimeout(context.Background(), c.Duration("shutdown-timeout"))
	defer cancel()
	err = errors.Join(serveErr, front.shutdown(shutCtx), closeMCP(), srv.Shutdown(shutCtx), leaveCluster(shutCtx), d.Shutdown(shutCtx))
	if errors.Is(err, context.DeadlineExceeded) {
		logger.Warn("shutdown deadline reached; remaining requests were cut")
		err = nil
	}
	return err
}

// serveListeners returns the API's listeners: systemd's (socket
// activation) if any, else the unix socket --socket (mode 0660, group
// --socket-group) and, with --listen-tcp, a TCP listener.
func serveListeners(c *cli.Context, tcpAddr string) ([]net.Listener, error) {
	ls, err := apiserver.ActivationListeners()
	if err != nil {
		return nil, fmt.Errorf("systemd socket activation: %w", err)
	}
	if len(ls) > 0 {
		return ls, nil
	}
	gid := -1
	if g := c.String("socket-group"); g != "" {
		if gid, err = lookupGroup(g); err != nil {
			return nil, err
		}
	}
	sock := c.String("socket")
	if sock == "" {
		return nil, errors.New("no --socket: give the unix socket path the API listens on")
	}
	ul, err := apiserver.ListenUnix(sock, 0o660, gid)
	if err != nil {
		return nil, err
	}
	ls = append(ls, ul)
	if tcpAddr != "" {
		tl, err := net.Listen("tcp", tcpAddr)
		if err != nil {
			ul.Close()
			return nil, fmt.Errorf("--listen-tcp: %w", err)
		}
		ls = append(ls, tl)
	}
	return ls, nil
}

// lookupGroup resolves a group name or number.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		return n, nil
	}
	grp, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("--socket-group %q: %w", g, err)
	}
	return strconv.Atoi(grp.Gid)
}

// serverTLS builds the TCP listener's TLS config from --tls-cert,
// --tls-key and --tls-client-ca; nil without a certificate.
func serverTLS(c *cli.Context) (*tls.Config, error) {
	certFile, keyFile := c.String("tls-cert"), c.String("tls-key")
	if certFile == "" && keyFile == "" {
		if c.String("tls-client-ca") != "" {
			return nil, errors.New("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("give both --tls-cert and --tls-key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if ca := c.String("tls-client-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-client-ca %s: no PEM certificate in it", ca)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

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
