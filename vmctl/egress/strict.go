package egress

import (
	"errors"
	"net"

	"github.com/miekg/dns"
)

// strictResolves is the resolver's check of an allowed name under
// netpolicy.DNSStrict (allowlist mode; the policy has no wildcard rules,
// so the name is one the policy spells out, never the guest's choice):
// the name is resolved on the host (Config.Hosts first, trusted; then the
// Resolver) and answered only if at least one of its addresses is one the
// proxy would connect to (forbiddenForProxy: public and not the host's).
// It reports whether the answer may be given; if not it has set m's
// rcode and d's reason: NXDOMAIN when the name does not exist upstream or
// leads only to addresses the sandbox may not reach, SERVFAIL when the
// lookup failed or maxLookups lookups are already in flight.
func (s *Service) strictResolves(m *dns.Msg, d *Decision) bool {
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	default:
		m.Rcode = dns.RcodeServerFailure
		d.Reason = "too many upstream lookups in flight"
		return false
	}
	addrs, trusted, err := s.lookup(d.Name, "ip")
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		m.Rcode = dns.RcodeNameError
		d.Reason = "dns strict: no such name upstream"
		return false
	case err != nil:
		m.Rcode = dns.RcodeServerFailure
		d.Reason = "dns strict: upstream lookup failed: " + err.Error()
		return false
	}
	for _, a := range addrs {
		if trusted || !forbiddenForProxy(a) {
			return true
		}
	}
	m.Rcode = dns.RcodeNameError
	d.Reason = "dns strict: resolves only to addresses the sandbox may not reach"
	return false
}
