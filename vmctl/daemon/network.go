package daemon

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// networkPolicy parses a create request's network; nil takes the image's
// default (manifest [network], mode none when absent).
// Errors: 400 invalid_argument with netpolicy's message.
func networkPolicy(req *api.NetworkPolicy, img *image.Image) (netpolicy.Policy, error) {
	if req == nil {
		return img.Manifest.DefaultNetwork(), nil
	}
	p, err := netpolicy.Parse(req.Mode, req.Allow)
	if err == nil {
		p, err = p.WithDNS(req.DNS)
	}
	if err != nil {
		return netpolicy.Policy{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("network: %v", err))
	}
	return p, nil
}

// tenantNetwork returns the policy of a create by the caller of ctx: for
// a tenant, p with private (RFC 1918), CGNAT and ULA destinations blocked
// (netpolicy.Policy.WithPrivateBlocked; the tap drops them and the egress
// resolver leaves them out of its answers), unless the operator opened
// them (Config.TenantPrivateNetworks, serve --tenant-private-networks); the
// admin's and mode none are unchanged. Errors: 403 permission_denied for
// a CIDR rule into those ranges, naming the rule, the range and the flag.
func tenantNetwork(ctx context.Context, p netpolicy.Policy, openPrivate bool) (netpolicy.Policy, error) {
	t, ok := tenant.From(ctx)
	if !ok || openPrivate || !p.HasNIC() {
		return p, nil
	}
	q, err := p.WithPrivateBlocked()
	if err != nil {
		return netpolicy.Policy{}, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("network: %v: tenant %s's sandboxes do not reach private networks; ask the operator for serve --tenant-private-networks", err, t.Name))
	}
	return q, nil
}

// networkArg is the audit argument of a sandbox's network: "none", "open"
// or "allowlist[example.com host:5432]".
func networkArg(r sandbox.Record) string {
	if r.Network == nil {
		return string(netpolicy.ModeNone)
	}
	return r.Network.Policy.String()
}

// networkView renders a record's network for inspect; records without one
// (older daemons) are mode none.
func networkView(r sandbox.Record) *api.NetworkInfo {
	if r.Network == nil {
		return &api.NetworkInfo{Mode: string(netpolicy.ModeNone)}
	}
	mode := r.Network.Policy.Mode
	if mode == "" {
		mode = netpolicy.ModeNone
	}
	v := &api.NetworkInfo{Mode: string(mode), Allow: r.Network.Policy.Strings(),
		DNS: string(r.Network.Policy.DNS), PrivateBlocked: r.Network.Policy.BlockPrivate}
	if len(v.Allow) == 0 {
		v.Allow = nil
	}
	if a := r.Network.Attachment; a != nil {
		v.Address = a.GuestConfig().Address
		v.Gateway = a.Host.String()
		v.Tap = a.Tap
		v.MAC = a.MAC
	}
	return v
}
