package netpolicy

import (
	"fmt"
	"strings"
)

// DNSMode is how the host resolves names for a sandbox. Its string values
// are part of the API (create's "network": {"dns": ...}, the manifest's
// [network] dns) and never change.
type DNSMode string

const (
	// DNSDefault (""): in allowlist mode the sandbox's resolver answers
	// every name a rule covers with the proxy's address, and the proxy
	// resolves on the host the name the guest sends (TLS SNI or HTTP
	// Host) when a rule covers it. With a wildcard rule (*.example.com)
	// that name is the guest's choice, so the host's resolver sends
	// guest-chosen names to the zone's name servers: data can leave in
	// the names, even when no connection follows. In open mode every
	// name is resolved upstream (the guest could reach any DNS server
	// anyway).
	DNSDefault DNSMode = ""
	// DNSStrict (allowlist mode only): the host resolves only names the
	// policy spells out. Wildcard rules are refused (any name below one
	// is the guest's choice; filtering the answers afterwards cannot take
	// back a query already sent), and the sandbox's resolver answers an
	// allowed name only after resolving it on the host to at least one
	// address the proxy would connect to (public, or pinned by the
	// operator's --network-host); else NXDOMAIN, so a name the sandbox
	// could not reach is not answered at all.
	DNSStrict DNSMode = "strict"
)

// ParseDNSMode parses "" or "default" (DNSDefault) and "strict". Errors
// wrap ErrInvalid.
func ParseDNSMode(s string) (DNSMode, error) {
	switch s {
	case "", "default":
		return DNSDefault, nil
	case string(DNSStrict):
		return DNSStrict, nil
	}
	return "", fmt.Errorf("%w: unknown dns mode %q: use strict, or leave it out for the default", ErrInvalid, s)
}

// WithDNS returns p with DNS mode s (ParseDNSMode). Errors (wrapping
// ErrInvalid): an unknown mode; strict with a mode other than allowlist
// (open lets the guest reach any DNS server itself; none has no
// network); strict with a wildcard rule.
func (p Policy) WithDNS(s string) (Policy, error) {
	return p.withOptions(s, p.BlockPrivate)
}

// WithPrivateBlocked returns p with BlockPrivate set: no private (RFC
// 1918), CGNAT (100.64.0.0/10) or ULA (fc00::/7) destination, in any
// mode. Errors (wrapping ErrInvalid): a CIDR rule that overlaps one of
// those ranges (directly or through an IPv4-embedding IPv6 form such as
// NAT64); the message names the rule and the range.
func (p Policy) WithPrivateBlocked() (Policy, error) {
	return p.withOptions(string(p.DNS), true)
}

// withOptions sets and checks the options of p, which Parse made.
func (p Policy) withOptions(dns string, blockPrivate bool) (Policy, error) {
	m, err := ParseDNSMode(dns)
	if err != nil {
		return Policy{}, err
	}
	p.DNS, p.BlockPrivate = m, blockPrivate
	if m == DNSStrict {
		switch p.Mode {
		case ModeAllowlist:
		case ModeOpen:
			return Policy{}, fmt.Errorf("%w: dns strict needs --network allowlist: with open the guest can reach any DNS server itself", ErrInvalid)
		default:
			return Policy{}, fmt.Errorf("%w: dns strict needs --network allowlist: mode none has no network", ErrInvalid)
		}
		for _, r := range p.Allow {
			if r.Kind == RuleName && strings.HasPrefix(r.Name, "*.") {
				return Policy{}, fmt.Errorf("%w: --allow %s: dns strict resolves only names the policy lists, and any name below a wildcard is the guest's choice: list each name (e.g. --allow www.%s), or leave dns strict out", ErrInvalid, r, strings.TrimPrefix(r.Name, "*."))
			}
		}
	}
	if blockPrivate {
		for _, r := range p.CIDRRules() {
			if c, rng, via, ok := classOverlap(r.Prefix, InsideClasses); ok {
				where := ""
				if via != "" {
					where = " (as " + via + ")"
				}
				return Policy{}, fmt.Errorf("%w: --allow %s: the range covers %s %s%s, and this sandbox may not reach private, CGNAT or ULA destinations", ErrInvalid, r, c, prefixString(rng), where)
			}
		}
	}
	return p, nil
}

// optionsString is String's tail for the options that are set.
func (p Policy) optionsString() string {
	s := ""
	if p.DNS != DNSDefault {
		s += " dns=" + string(p.DNS)
	}
	if p.BlockPrivate {
		s += " private=blocked"
	}
	return s
}
