package host

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// clusterQuotas returns the daemon's tenant quota store
// (daemon.Config.Quotas): with both a cluster and tenants the
// cluster-wide one (cluster.QuotaStore, also set in cfg for the node to
// connect), else nil (the daemon's tenant.LocalStore of this host).
func clusterQuotas(o *ClusterOptions, tenants *tenant.Registry) tenant.QuotaStore {
	if o == nil || tenants == nil {
		return nil
	}
	o.Config.Quotas = cluster.NewQuotaStore(o.Config.Node)
	return o.Config.Quotas
}

// joinCluster joins the cluster of o (nil: none), makes d one of its
// nodes and returns the router of requests between the nodes
// (vmctl/clusterproxy, for apiserver.Config.Router; nil without a
// cluster); leave ends both, before the daemon shuts down (nil without a
// cluster).
func joinCluster(ctx context.Context, o *ClusterOptions, a Auth, d *daemon.Daemon, logger *slog.Logger, say func(string)) (router apiserver.Router, leave func(context.Context) error, err error) {
	if o == nil {
		return nil, nil, nil
	}
	if err := checkClusterTransport(a, o); err != nil { // auth.go
		return nil, nil, err
	}
	cfg := o.Config
	cfg.Local, cfg.Logger = d, logger
	cfg.Priority = func(_ context.Context, req api.CreateSandboxRequest) string { return req.Priority }
	pcfg := clusterproxy.Config{Local: d.HasSandbox, TLS: o.TLS, Logger: logger}
	clusterPeerAuth(a, &pcfg, cfg) // auth.go
	// A create's secrets go node to node over the API, never into NATS.
	sc, err := clusterSecretsClient(a, o, cfg.Node) // auth.go
	if err != nil {
		return nil, nil, fmt.Errorf("--cluster-token-file %s: %w", a.ClusterTokenFile, err)
	}
	cfg.FetchSecrets = sc.Fetch
	n, err := cluster.Join(ctx, *cfg)
	if err != nil {
		sc.Close()
		return nil, nil, err
	}
	pcfg.Directory, pcfg.Nodes, pcfg.Secrets = n, n, n
	p, err := clusterRouter(pcfg, a)
	if err != nil {
		n.Close(ctx)
		sc.Close()
		return nil, nil, err
	}
	d.SetCluster(n)
	say(fmt.Sprintf("node %s of the cluster at %s (advertised as %s)", cfg.Node, redactedServers(cfg.Servers), cfg.Advertise))
	return p, func(ctx context.Context) error {
		d.SetCluster(nil)
		p.Close()
		err := n.Close(ctx)
		sc.Close()
		return err
	}, nil
}

// redactedServers lists NATS server URLs for the log, comma-separated,
// with any user, password or token in them replaced by "redacted".
func redactedServers(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		u, err := url.Parse(s)
		switch {
		case err != nil && strings.Contains(s, "@"):
			out[i] = "redacted"
		case err == nil && u.User != nil:
			u.User = url.User("redacted")
			out[i] = u.String()
		default:
			out[i] = s
		}
	}
	return strings.Join(out, ",")
}

// clusterRouter makes the Proxy of pcfg (its Directory and Nodes the
// joined node's); an error names the cluster token's file.
func clusterRouter(pcfg clusterproxy.Config, a Auth) (*clusterproxy.Proxy, error) {
	p, err := clusterproxy.New(pcfg)
	if err != nil {
		return nil, fmt.Errorf("--cluster-token-file %s: %w", a.ClusterTokenFile, err)
	}
	return p, nil
}
