package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// TestTenantNetwork: a tenant's sandbox gets private, CGNAT and ULA
// destinations blocked in every mode unless the operator opens them; its
// CIDR rules into them are refused with 403 naming the rule and the flag;
// the admin's policies and mode none are unchanged.
func TestTenantNetwork(t *testing.T) {
	admin := context.Background()
	tn := tenant.With(admin, &tenant.Tenant{Name: "a"})
	parse := func(mode string, allow ...string) netpolicy.Policy {
		p, err := netpolicy.Parse(mode, allow)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := parse("open", "host:8080")
	allow := parse("allowlist", "example.com", "198.51.100.0/24:80")
	lan := parse("allowlist", "10.1.0.0/16:5432")
	for _, tc := range []struct {
		ctx         context.Context
		p           netpolicy.Policy
		openPrivate bool
		want        string
	}{
		{tn, open, false, "open[host:8080] private=blocked"},
		{tn, allow, false, "allowlist[example.com 198.51.100.0/24:80] private=blocked"},
		{tn, netpolicy.Policy{Mode: netpolicy.ModeNone}, false, "none"},
		{tn, open, true, "open[host:8080]"},
		{tn, lan, true, "allowlist[10.1.0.0/16:5432]"},
		{admin, open, false, "open[host:8080]"},
		{admin, lan, false, "allowlist[10.1.0.0/16:5432]"},
	} {
		got, err := tenantNetwork(tc.ctx, tc.p, tc.openPrivate)
		if err != nil || got.String() != tc.want {
			t.Errorf("tenantNetwork(%s, open private %v): %s, %v; want %s", tc.p, tc.openPrivate, got, err, tc.want)
		}
	}
	_, err := tenantNetwork(tn, lan, false)
	want := "network: invalid network policy: --allow 10.1.0.0/16:5432: the range covers private 10.0.0.0/8, and this sandbox may not reach private, CGNAT or ULA destinations: tenant a's sandboxes do not reach private networks; ask the operator for serve --tenant-private-networks"
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), want) {
		t.Errorf("tenant CIDR rule into 10/8: %v, want permission denied with %q", err, want)
	}
}

// TestNetworkPolicyDNS: the create request's dns is the policy's, checked.
func TestNetworkPolicyDNS(t *testing.T) {
	p, err := networkPolicy(&api.NetworkPolicy{Mode: "allowlist", Allow: []string{"example.com"}, DNS: "strict"}, nil)
	if err != nil || p.DNS != netpolicy.DNSStrict {
		t.Fatalf("dns strict: %+v, %v", p, err)
	}
	for _, req := range []api.NetworkPolicy{
		{Mode: "allowlist", Allow: []string{"*.example.com"}, DNS: "strict"},
		{Mode: "open", DNS: "strict"},
		{Mode: "allowlist", DNS: "sometimes"},
	} {
		if _, err := networkPolicy(&req, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "dns") {
			t.Errorf("%+v: %v, want invalid argument about dns", req, err)
		}
	}
	// inspect shows both options.
	p.BlockPrivate = true
	v := networkView(sandbox.Record{Network: &sandbox.NetworkRecord{Policy: p, Attachment: &network.Attachment{}}})
	if v.DNS != "strict" || !v.PrivateBlocked || v.Mode != "allowlist" {
		t.Errorf("networkView: %+v", v)
	}
}
