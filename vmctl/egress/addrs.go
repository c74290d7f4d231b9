package egress

import (
	"net"
	"net/netip"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// openMode is the policy whose open-mode reach forbiddenAlways judges by.
var openMode = netpolicy.Policy{Mode: netpolicy.ModeOpen}

// forbiddenAlways reports addresses no resolver answer may lead to, in any
// mode: what open mode never reaches (netpolicy.Policy.OpenReaches:
// loopback, link-local with metadata 169.254.169.254, multicast,
// unspecified, 0.0.0.0/8, reserved and broadcast, carrier-grade NAT with
// metadata 100.100.100.200, fd00:ec2::254) and the host's own addresses.
// IPv6 addresses that carry an IPv4 address (NAT64 64:ff9b::/96, 6to4,
// IPv4-mapped, ...) are judged as that address (netpolicy.Classify).
func forbiddenAlways(a netip.Addr) bool { return forbiddenOpen(openMode, a) }

// forbiddenOpen is forbiddenAlways for the sandbox of policy p: with
// p.BlockPrivate (a tenant's sandbox) private and ULA addresses too, as
// the tap's forward rules drop them.
func forbiddenOpen(p netpolicy.Policy, a netip.Addr) bool {
	return !p.OpenReaches(a) || isHostAddr(a)
}

// forbiddenForProxy reports addresses an allowlisted name resolved by the
// real resolver may not lead to: any but public ones (netpolicy.Classify;
// so private RFC 1918, CGNAT and fc00::/7 too, as DNS-rebinding
// protection), and the host's own.
func forbiddenForProxy(a netip.Addr) bool {
	return netpolicy.Classify(a) != netpolicy.ClassPublic || isHostAddr(a)
}

// isHostAddr reports whether a, or the IPv4 address it carries
// (netpolicy.Embedded4), is assigned to one of the host's interfaces.
func isHostAddr(a netip.Addr) bool {
	a = a.WithZone("")
	v4, _ := netpolicy.Embedded4(a)
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false // the other checks still apply
	}
	for _, ia := range ifAddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && (b.Unmap() == a || b.Unmap() == v4) {
				return true
			}
		}
	}
	return false
}
