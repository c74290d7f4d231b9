package host

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// The fronts' secrets, wired in this file only: which of Options.Auth
// each front checks. The REST API (and /mcp behind it) takes the admin
// token, TLS and the tenants; the E2B control plane takes the admin
// token or a tenant's as its API key; the cluster peers send each other
// ClusterToken and name a request's tenant by the hooks below. A change
// of how secrets are checked (one keyring for every front) is a change
// of these functions.

// apiAuth sets the REST API's secrets in cfg.
func apiAuth(a Auth, cfg *apiserver.Config) {
	cfg.Token, cfg.TLS, cfg.Tenants = a.Token, a.TLS, a.Tenants
}

// e2bAuth sets the E2B front's API keys in cfg: the admin token (white
// space trimmed, as the API server reads it) and the tenants' tokens.
// ok is false when there is no key at all.
func e2bAuth(a Auth, cfg *e2b.Config) (ok bool) {
	cfg.APIKey = strings.TrimSpace(a.Token)
	cfg.Tenants = a.Tenants // a tenant's token is its API key
	return cfg.APIKey != "" || a.Tenants != nil
}

// clusterPeerAuth sets the token the cluster's nodes send each other in
// pcfg, and the tenant hooks of forwarded (pcfg) and queued (ccfg)
// requests.
func clusterPeerAuth(a Auth, pcfg *clusterproxy.Config, ccfg *cluster.Config) {
	pcfg.Token = a.ClusterToken
	pcfg.TenantOf, pcfg.WithTenant = clusterTenantHooks(a.Tenants)
	ccfg.Tenant, ccfg.WithTenant = pcfg.TenantOf, pcfg.WithTenant
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
