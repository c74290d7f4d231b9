package host

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// The fronts' secrets, wired in this file only: which of Options.Auth
// each front checks. Every front checks the daemon's one keyring
// (vmctl/auth, made by keyring): the REST API (and /mcp behind it) takes
// it with the admin token, TLS and the tenants; the E2B control plane
// takes it for its API keys (the admin token or a tenant's); on a node of
// a cluster it holds ClusterToken as the peers' secret, which the API
// server tells the cluster router of (apiserver.Router.Peer), and the
// nodes send each other ClusterToken and name a request's tenant by the
// hooks below. A change of how secrets are checked is a change of these
// functions.

// keyring returns the daemon's one keyring of a, for every front: the
// admin's token and the tenants and, on a node of a cluster (peers), the
// cluster token as the peers' (auth.Config.Peer). Without peers it holds
// no peer secret: apiserver.NewServer wants one exactly with a Router.
func keyring(a Auth, peers bool) *auth.Keyring {
	cfg := auth.Config{Admin: a.Token, Tenants: a.Tenants}
	if peers {
		cfg.Peer = a.ClusterToken
	}
	return auth.New(cfg)
}

// distinctSecrets refuses a tenant whose token is the cluster token
// (Auth.ClusterToken, with peers): the keyring would take that tenant's
// requests for a peer's, and a peer's requests carry any caller's
// identity and tenant (clusterproxy), so the tenant could act as the
// admin or as any other tenant. (A tenant holding the admin's token is
// refused where the tenants file is read, cmd/agentbox/tenants.go.)
// Errors: a plain error naming the tenant and the file, saying what to do.
func distinctSecrets(a Auth, peers bool) error {
	tok := strings.TrimSpace(a.ClusterToken)
	if !peers || tok == "" {
		return nil
	}
	if t, ok := a.Tenants.Lookup(tok); ok {
		return fmt.Errorf("tenants file: tenant %q has the cluster token (--cluster-token-file %s), which the cluster's nodes authenticate each other with and whose requests may act for anyone: give the tenant its own token", t.Name, a.ClusterTokenFile)
	}
	return nil
}

// apiAuth sets the REST API's secrets in cfg: the keyring keys, and the
// admin token, TLS and tenants it was made of (apiserver.Config checks
// that keys holds Token and Tenants).
func apiAuth(a Auth, keys *auth.Keyring, cfg *apiserver.Config) {
	cfg.Token, cfg.TLS, cfg.Tenants, cfg.Keyring = a.Token, a.TLS, a.Tenants, keys
}

// e2bAuth sets the E2B front's API keys in cfg: those of the keyring keys
// (the admin token and, with tenants, a tenant's token, acting for its
// tenant). ok is false when keys requires no secret at all.
func e2bAuth(keys *auth.Keyring, cfg *e2b.Config) (ok bool) {
	cfg.Keyring = keys // a tenant's token is its API key
	return keys.RequiresSecret()
}

// clusterPeerAuth sets the token the cluster's nodes send each other in
// pcfg, and the tenant hooks of forwarded (pcfg) and queued (ccfg)
// requests.
func clusterPeerAuth(a Auth, pcfg *clusterproxy.Config, ccfg *cluster.Config) {
	pcfg.Token = a.ClusterToken
	pcfg.TenantOf, pcfg.WithTenant = clusterTenantHooks(a.Tenants)
	ccfg.Tenant, ccfg.WithTenant = pcfg.TenantOf, pcfg.WithTenant
}

// clusterSecretsClient is the node's fetcher of the secrets of creates
// it takes from other nodes (cluster.Config.FetchSecrets): with the
// cluster token, as node self, over o's TLS, from http:// nodes only on a
// trusted network.
func clusterSecretsClient(a Auth, o *ClusterOptions, self string) (*clusterproxy.SecretsClient, error) {
	return clusterproxy.NewSecretsClient(clusterproxy.SecretsConfig{Token: a.ClusterToken, Self: self, TLS: o.TLS, AllowHTTP: o.TrustedNetwork})
}

// checkClusterTransport refuses an http:// advertise URL unless the
// operator says the network is trusted: the nodes would send the cluster
// token and the creates' secrets to it in clear.
func checkClusterTransport(a Auth, o *ClusterOptions) error {
	u, err := url.Parse(o.Config.Advertise)
	if err != nil || u.Scheme != "http" || o.TrustedNetwork || strings.TrimSpace(a.ClusterToken) == "" {
		return nil
	}
	return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("--advertise %s is http://: the other nodes would send it the cluster token and the creates' secrets in clear; advertise https:// (--tls-cert, --tls-key, and --cluster-ca on every node), or say the network between the nodes is trusted with --cluster-trusted-network", o.Config.Advertise))
}

// clusterTenantHooks are the TenantOf and WithTenant hooks of
// clusterproxy.Config and cluster.Config for the tenants of reg (both nil
// without tenants): a forwarded or queued request acts for the tenant
// the other node names, if this node's tenants file has it (else
// ErrPermissionDenied, 403).
func clusterTenantHooks(reg *tenant.Registry) (tenantOf func(context.Context) string, withTenant func(context.Context, string) (context.Context, error)) {
	if reg == nil {
		return nil, nil
	}
	return tenant.Name, func(ctx context.Context, name string) (context.Context, error) {
		t, ok := reg.Get(name)
		if !ok {
			return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("tenant %q is not in this node's --tenants file: give every node of the cluster the same file", name))
		}
		return tenant.With(ctx, t), nil
	}
}
