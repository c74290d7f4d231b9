package network

import (
	"net/netip"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// blockedDests returns the IPv4 destinations the forward chain of a
// sandbox with policy p drops before its policy's accept rules, in this
// order (netpolicy.Prefixes4 and Classify share the ranges, so the egress
// resolver's answers agree with the tap):
//
//   - always: this network 0.0.0.0/8, loopback 127.0.0.0/8, link-local
//     169.254.0.0/16 (metadata 169.254.169.254), multicast 224.0.0.0/4,
//     reserved 240.0.0.0/4 (broadcast) and the metadata address
//     100.100.100.200/32 (netpolicy.NeverClasses);
//   - open mode: CGNAT 100.64.0.0/10 as well (cloud services live there;
//     an allowlist's explicit CIDR rule may still name a range of it);
//   - p.BlockPrivate (a tenant's sandbox by default): private 10.0.0.0/8,
//     172.16.0.0/12, 192.168.0.0/16 and CGNAT 100.64.0.0/10, in every
//     mode (netpolicy.InsideClasses).
//
// IPv6 needs no entries: the chain drops every packet that is not IPv4
// first, so IPv4-embedding IPv6 ranges (NAT64 64:ff9b::/96, 6to4
// 2002::/16, ...) never leave the tap, whatever IPv4 address they carry.
func blockedDests(p netpolicy.Policy) []netip.Prefix {
	out := netpolicy.Prefixes4(netpolicy.NeverClasses...)
	var more []netip.Prefix
	switch {
	case p.BlockPrivate:
		more = netpolicy.Prefixes4(netpolicy.InsideClasses...)
	case p.Mode == netpolicy.ModeOpen:
		more = netpolicy.Prefixes4(netpolicy.ClassCGNAT)
	}
	return append(out, more...)
}
