package network

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// never is what every sandbox's forward chain drops (blockedDests).
const never = "0.0.0.0/8 127.0.0.0/8 169.254.0.0/16 224.0.0.0/4 240.0.0.0/4 100.100.100.200/32"

func prefixesString(ps []netip.Prefix) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, " ")
}

func TestBlockedDests(t *testing.T) {
	allow, _ := netpolicy.Parse("allowlist", []string{"example.test", "198.51.100.0/24:80"})
	for _, tc := range []struct {
		p    netpolicy.Policy
		want string
	}{
		{allow, never},
		{netpolicy.Policy{Mode: netpolicy.ModeOpen}, never + " 100.64.0.0/10"},
		{netpolicy.Policy{Mode: netpolicy.ModeOpen, BlockPrivate: true}, never + " 100.64.0.0/10 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16"},
		{netpolicy.Policy{Mode: netpolicy.ModeAllowlist, Allow: allow.Allow, BlockPrivate: true}, never + " 100.64.0.0/10 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16"},
	} {
		if got := prefixesString(blockedDests(tc.p)); got != tc.want {
			t.Errorf("blockedDests(%s) = %s, want %s", tc.p, got, tc.want)
		}
		// Every address the chain drops is one the egress resolver's
		// open-mode answers leave out too (netpolicy.OpenReaches): the two
		// layers agree.
		for _, pfx := range blockedDests(tc.p) {
			open := tc.p
			open.Mode = netpolicy.ModeOpen
			for _, a := range []netip.Addr{pfx.Addr(), lastAddr(pfx)} {
				if open.OpenReaches(a) {
					t.Errorf("%s: the tap drops %s (in %s) but OpenReaches says reachable", tc.p, a, pfx)
				}
			}
		}
	}
}

// lastAddr is the highest address of p (IPv4).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom4(b)
}
