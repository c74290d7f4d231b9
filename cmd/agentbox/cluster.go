package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// serveClusterFlags are serve's flags for joining a cluster on NATS
// JetStream (docs/cluster.md).
func serveClusterFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "cluster", Usage: "join the cluster whose NATS servers (with JetStream) are at `URLS` (nats://n1:4222,nats://n2:4222): creates go through the cluster's queue to a node with room; see docs/cluster.md"},
		&cli.StringFlag{Name: "node", Usage: "this node's `NAME` in the cluster (needs --cluster)"},
		&cli.StringFlag{Name: "advertise", Usage: "the `URL` other nodes and clients reach this node's API at, e.g. https://h1:7070 (needs --cluster)"},
		&cli.StringFlag{Name: "nats-token-file", Usage: "authenticate to NATS with the token in `FILE` (its authorization { token }; needs --cluster)"},
		&cli.DurationFlag{Name: "queue-timeout", Value: cluster.DefaultQueueTimeout, Usage: "how long a cluster create waits in the queue for a node with room before 429 queue_timeout"},
	}
}

// serveClusterConfig checks serve's cluster flags (before anything is
// started) and returns the node's configuration without Local and
// Logger; nil without --cluster.
func serveClusterConfig(c *cli.Context) (*cluster.Config, error) {
	var servers []string
	for _, v := range c.StringSlice("cluster") {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				servers = append(servers, u)
			}
		}
	}
	if len(servers) == 0 {
		for _, f := range []string{"node", "advertise", "nats-token-file", "cluster-token-file", "cluster-ca"} {
			if c.IsSet(f) {
				return nil, fmt.Errorf("--%s needs --cluster nats://HOST:4222: a node name and address only mean something in a cluster", f)
			}
		}
		return nil, nil
	}
	if c.String("node") == "" || c.String("advertise") == "" {
		return nil, fmt.Errorf("--cluster needs --node NAME (this node's name) and --advertise URL (where the other nodes and clients reach its API)")
	}
	if !api.ValidName(c.String("node")) {
		return nil, fmt.Errorf("--node %q: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (not 12 hex digits)", c.String("node"))
	}
	if u, err := url.Parse(c.String("advertise")); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--advertise %q: give the URL of this node's TCP API, e.g. https://h1:7070", c.String("advertise"))
	}
	if c.String("cluster-token-file") == "" {
		return nil, fmt.Errorf("--cluster needs --cluster-token-file: the nodes forward requests to each other with its token (give every node the same file, e.g. made with `openssl rand -hex 32`)")
	}
	if c.Duration("queue-timeout") <= 0 {
		return nil, fmt.Errorf("--queue-timeout %s: must be positive", c.Duration("queue-timeout"))
	}
	token := ""
	if f := c.String("nats-token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("--nats-token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	return &cluster.Config{
		Servers: servers, Token: token, Node: c.String("node"), Advertise: c.String("advertise"),
		Version: version, QueueTimeout: c.Duration("queue-timeout"),
	}, nil
}

// serveCluster joins the cluster of cfg (serveClusterConfig; nil: none),
// makes d one of its nodes and returns the router of requests between the
// nodes (vmctl/clusterproxy, for apiserver.Config.Router; nil without a
// cluster) and the daemon's keyring: that of secrets (the admin's token and
// the tenants) with the cluster token as the peers' (auth.Config.Peer),
// for every front; leave ends both, before the daemon shuts down.
func serveCluster(ctx context.Context, c *cli.Context, cfg *cluster.Config, d *daemon.Daemon, secrets auth.Config, logger *slog.Logger) (router apiserver.Router, keys *auth.Keyring, leave func(context.Context) error, err error) {
	if cfg == nil {
		return nil, auth.New(secrets), func(context.Context) error { return nil }, nil
	}
	tenants := secrets.Tenants
	cfg.Local, cfg.Logger = d, logger
	cfg.Priority = func(_ context.Context, req api.CreateSandboxRequest) string { return req.Priority }
	tenantOf, withTenant := clusterTenantHooks(tenants) // tenants.go
	cfg.Tenant, cfg.WithTenant = tenantOf, withTenant
	n, err := cluster.Join(ctx, *cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	pcfg := clusterproxy.Config{Local: d.HasSandbox, TenantOf: tenantOf, WithTenant: withTenant}
	p, peerToken, err := clusterRouter(c, n, n, pcfg, logger) // clusterproxy.go
	if err != nil {
		n.Close(ctx)
		return nil, nil, nil, err
	}
	secrets.Peer = peerToken
	d.SetCluster(n)
	fmt.Fprintf(c.App.ErrWriter, "agentbox serve: node %s of the cluster at %s (advertised as %s)\n", cfg.Node, strings.Join(cfg.Servers, ","), cfg.Advertise)
	return p, auth.New(secrets), func(ctx context.Context) error {
		d.SetCluster(nil)
		p.Close()
		return n.Close(ctx)
	}, nil
}

// serveQuotas returns the daemon's tenant quota store (daemon.Config.Quotas):
// with both --cluster and --tenants the cluster-wide one (cluster.QuotaStore,
// also set in cfg for the node to connect), else nil (the daemon's
// tenant.LocalStore of this host).
func serveQuotas(cfg *cluster.Config, tenants *tenant.Registry) tenant.QuotaStore {
	if cfg == nil || tenants == nil {
		return nil
	}
	cfg.Quotas = cluster.NewQuotaStore(cfg.Node)
	return cfg.Quotas
}
