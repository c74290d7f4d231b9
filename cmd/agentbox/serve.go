package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/host"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
)

func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "run the agentbox daemon: REST API on a unix socket, long-lived sandboxes",
		Description: "Serves the REST API (/v1, see vmctl/api/openapi.yaml) on the unix socket --socket, and on TCP with\n" +
			"--listen-tcp (which needs the global --token-file, whose token TCP clients must send, or --tls-cert/--tls-key with --tls-client-ca). State (store, audit log, overlays,\n" +
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

// serveAction implements `agentbox serve`: the flags become host.Options
// (serveOptions) and vmctl/host assembles, serves and ends the daemon.
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
	o, err := serveOptions(c, logger)
	if err != nil {
		return err
	}
	if c.Bool("network-cleanup") {
		return networkCleanup(c, o) // servenet.go
	}
	if err := serveStartOptions(c, logger, &o); err != nil {
		return err
	}
	h, err := host.Start(ctx, o)
	if err != nil {
		return err
	}
	h.Wait(ctx)
	stop() // from here a second SIGTERM or SIGINT kills at once
	return h.Shutdown(context.Background())
}

// serveOptions turns what serve checks before it holds its socket (and
// what `serve --network-cleanup` needs) into host.Options: directories,
// secrets, listeners, daemon settings and the printing.
func serveOptions(c *cli.Context, logger *slog.Logger) (host.Options, error) {
	o := hostOptions(c, logger, "agentbox serve:")
	o.Socket = c.String("socket")
	o.SocketGroup = c.String("socket-group")
	o.ListenTCP = c.String("listen-tcp")
	o.Templates = func(ctx context.Context) ([]daemon.Template, error) { return serveTemplates(ctx, c) } // templates.go
	o.Node = c.String("node")                                                                            // cluster.go: "" without --cluster
	o.CapacityMemoryMiB = c.Int("capacity-memory")
	o.CapacityVCPUs = c.Int("capacity-vcpus")
	o.TCGCacheMiB = c.Int("tcg-cache")
	o.Defaults = api.Limits{
		TTLSeconds:         int64(c.Duration("default-ttl").Seconds()),
		IdleTimeoutSeconds: int64(c.Duration("default-idle-timeout").Seconds()),
		ExecTimeoutMs:      c.Duration("default-exec-timeout").Milliseconds(),
		MaxExecs:           c.Int("default-max-execs"),
	}
	o.StopOnExit = c.Bool("stop-on-exit")
	o.WarmPool = c.Int("warm-pool")
	o.WarmTemplates = c.Int("warm-templates")
	o.AuditMaxBytes = c.Int64("audit-max-bytes")
	o.AuditMaxFiles = c.Int("audit-max-files")
	o.AuditFullTty = c.Bool("audit-full-tty")
	o.ShutdownTimeout = c.Duration("shutdown-timeout")
	o.OnReady = func(h *host.Host) { printServeReady(c, h) }
	o.Ceilings, o.Thresholds, o.UsageInterval = daemonResources(c) // resources.go
	if f := c.String("token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return o, fmt.Errorf("--token-file: %w", err)
		}
		o.Auth.Token = string(b)
	}
	var err error
	if o.Auth.TLS, err = serverTLS(c); err != nil {
		return o, err
	}
	if o.Auth.Tenants, err = serveTenants(c, o.Auth.Token); err != nil { // tenants.go
		return o, err
	}
	if o.WarmMode, err = warm.ParseMode(c.String("warm-mode")); err != nil {
		return o, usageError(c, err, false)
	}
	clusterCfg, err := serveClusterConfig(c) // cluster.go
	if err != nil {
		return o, usageError(c, err, false)
	}
	if clusterCfg != nil {
		o.Cluster = &host.ClusterOptions{Config: clusterCfg, TrustedNetwork: c.Bool("cluster-trusted-network")}
	}
	return o, nil
}

// serveStartOptions adds to o what only a serve that starts needs: the
// network, the policy plugin, QEMU's users, the cluster peers, MCP and
// E2B.
func serveStartOptions(c *cli.Context, logger *slog.Logger, o *host.Options) error {
	var err error
	if o.Network, err = serveNetworkOptions(c); err != nil { // servenet.go
		return err
	}
	if o.Policy, err = servePolicyOptions(c); err != nil { // policy.go
		return err
	}
	if o.QEMUUsers, err = qemuUsers(c); err != nil { // qemuuser.go
		return err
	}
	if o.Cluster != nil {
		if o.Auth.ClusterToken, o.Auth.ClusterTokenFile, o.Cluster.TLS, err = clusterPeers(c); err != nil { // clusterproxy.go
			return err
		}
	}
	if c.Bool("mcp") {
		cfg, err := mcpConfig(c, logger) // mcp.go
		if err != nil {
			return err
		}
		o.MCP = &host.MCPOptions{Config: cfg, SessionTimeout: c.Duration("mcp-session-timeout")}
	}
	if addr := c.String("e2b-listen"); addr != "" {
		o.E2B = &host.E2BOptions{Listen: addr, Warm: c.Bool("e2b-warm")}
	}
	return nil
}

// printServeReady prints serve's "listening on" line (host.Options.OnReady).
func printServeReady(c *cli.Context, h *host.Host) {
	rep := h.Report()
	where := c.String("socket")
	if tcp := c.String("listen-tcp"); tcp != "" {
		where += " and " + tcp
	}
	if addr := h.E2BAddr(); addr != "" {
		where += ", E2B API on " + addr
	}
	fmt.Fprintf(c.App.ErrWriter, "agentbox serve: listening on %s (state %s); %d sandboxes known, %d adopted, %d failed, %d leftovers cleaned\n",
		where, h.StateDir(), rep.Loaded, len(rep.Adopted), len(rep.Failed), len(rep.Cleaned))
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
