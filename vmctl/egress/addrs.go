package egress

import (
	"net"
	"net/netip"
)

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	cgnat       = netip.MustParsePrefix("100.64.0.0/10") // holds the metadata address 100.100.100.200
	broadcast   = netip.MustParseAddr("255.255.255.255")
	ec2Metadata = netip.MustParseAddr("fd00:ec2::254")
)

// forbiddenAlways reports addresses no resolver answer may lead to, in any
// mode: loopback, link-local (169.254.169.254 metadata), multicast,
// unspecified, 0.0.0.0/8, broadcast, carrier-grade NAT and metadata
// addresses, and the host's own addresses.
func forbiddenAlways(a netip.Addr) bool {
	a = a.Unmap()
	return !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() ||
		a.IsMulticast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() ||
		thisNetwork.Contains(a) || cgnat.Contains(a) || a == broadcast || a == ec2Metadata ||
		isLocalAddr(a)
}

// forbiddenForProxy adds private ranges (RFC 1918, fc00::/7) to
// forbiddenAlways: an allowlisted name resolved by the real resolver must
// lead to a public address (DNS-rebinding protection).
func forbiddenForProxy(a netip.Addr) bool {
	return forbiddenAlways(a) || a.Unmap().IsPrivate()
}

// isLocalAddr reports whether a is assigned to one of the host's interfaces.
func isLocalAddr(a netip.Addr) bool {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return false // the other checks still apply
	}
	for _, ia := range ifAddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if b, ok := netip.AddrFromSlice(n.IP); ok && b.Unmap() == a {
				return true
			}
		}
	}
	return false
}
