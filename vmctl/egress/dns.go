package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/miekg/dns"
)

// dnsTTL is the TTL of answers (seconds). Answers for allowed names are
// always H, so caching them is harmless.
const dnsTTL = 60

// maxLookups caps the upstream lookups in flight for forwarded questions;
// past it the resolver answers SERVFAIL (a guest cannot pile up goroutines).
const maxLookups = 64

// maxForwardAnswers caps the addresses per forwarded answer, so a UDP
// answer stays small.
const maxForwardAnswers = 8

// serveDNS answers one query as described in the package doc.
func (s *Service) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	guest := addrPort(w.RemoteAddr())
	d := Decision{Kind: KindDNS, Port: 53, Guest: guest}
	switch {
	case req.Response:
		return // never answer answers
	case req.Opcode != dns.OpcodeQuery:
		m.SetRcode(req, dns.RcodeRefused)
		d.Reason = "opcode " + dns.OpcodeToString[req.Opcode] + " refused"
	case len(req.Question) != 1:
		m.SetRcode(req, dns.RcodeFormatError)
		d.Reason = "not exactly one question"
	default:
		q := req.Question[0]
		d.Name = canonicalName(q.Name)
		m.SetReply(req)
		m.Authoritative = true
		m.RecursionAvailable = false
		s.answer(m, q, &d)
	}
	if o := req.IsEdns0(); o != nil {
		m.SetEdns0(dns.DefaultMsgSize, false)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if o := req.IsEdns0(); o != nil {
			size = max(int(o.UDPSize()), dns.MinMsgSize)
		}
		m.Truncate(size)
	}
	s.decide(d)
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("egress DNS write", "guest", guest.String(), "err", err)
	}
}

// answer fills m (already a reply to q) and d.
func (s *Service) answer(m *dns.Msg, q dns.Question, d *Decision) {
	refuse := func(reason string) {
		m.Rcode = dns.RcodeRefused
		d.Reason = reason
	}
	if q.Qclass != dns.ClassINET {
		refuse("class " + dns.ClassToString[q.Qclass] + " refused")
		return
	}
	switch q.Qtype {
	case dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR, dns.TypeNone, dns.TypeOPT, dns.TypeTKEY, dns.TypeTSIG, dns.TypeMAILA, dns.TypeMAILB:
		refuse("query type " + dns.Type(q.Qtype).String() + " refused")
		return
	}
	name := d.Name
	pol := s.cfg.Policy
	local := (name == netpolicy.HostAlias && len(pol.HostPorts()) > 0) ||
		(pol.Mode == netpolicy.ModeAllowlist && pol.AllowsName(name))
	switch {
	case local:
		if pol.DNS == netpolicy.DNSStrict && name != netpolicy.HostAlias && !s.strictResolves(m, d) { // strict.go
			return
		}
		d.Allowed = true
		d.Reason = "allowed"
		if (q.Qtype == dns.TypeA && s.cfg.Addr.Is4()) || (q.Qtype == dns.TypeAAAA && s.cfg.Addr.Is6()) {
			m.Answer = append(m.Answer, addrRR(q.Name, s.cfg.Addr))
		}
	case s.cfg.ForwardAll:
		s.forward(m, q, d)
	default:
		m.Rcode = dns.RcodeNameError
		d.Reason = "not in allowlist"
	}
}

// forward answers A/AAAA with the name's real, filtered addresses (ForwardAll).
func (s *Service) forward(m *dns.Msg, q dns.Question, d *Decision) {
	if q.Qtype != dns.TypeA && q.Qtype != dns.TypeAAAA {
		d.Allowed = true
		d.Reason = "allowed (no data for type " + dns.Type(q.Qtype).String() + ")"
		return
	}
	network := "ip4"
	if q.Qtype == dns.TypeAAAA {
		network = "ip6"
	}
	select {
	case s.lookups <- struct{}{}:
		defer func() { <-s.lookups }()
	default:
		m.Rcode = dns.RcodeServerFailure
		d.Reason = "too many upstream lookups in flight"
		return
	}
	addrs, trusted, err := s.lookup(d.Name, network)
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr) && dnsErr.IsNotFound:
		m.Rcode = dns.RcodeNameError
		d.Reason = "no such name upstream"
		return
	case err != nil:
		m.Rcode = dns.RcodeServerFailure
		d.Reason = "upstream lookup failed: " + err.Error()
		return
	}
	var refused int
	for _, a := range addrs {
		if (network == "ip4") != a.Is4() {
			continue
		}
		if !trusted && forbiddenOpen(s.cfg.Policy, a) { // addrs.go
			refused++
			continue
		}
		if len(m.Answer) < maxForwardAnswers {
			m.Answer = append(m.Answer, addrRR(q.Name, a))
		}
	}
	d.Allowed = true
	d.Reason = "allowed"
	if refused > 0 && len(m.Answer) == 0 {
		d.Allowed = false
		d.Reason = "resolves only to loopback, link-local, metadata or host addresses"
	}
}

// lookup resolves name on the host: Config.Hosts first, then the
// Resolver. Addresses come back unmapped. network is "ip", "ip4" or "ip6".
// Config.Hosts' addresses are trusted (may be loopback or private) unless
// the policy has BlockPrivate (a tenant's sandbox): then they are checked
// as the Resolver's are, so an operator's pin into the host or its
// networks does not open them to tenants.
func (s *Service) lookup(name, network string) (addrs []netip.Addr, trusted bool, err error) {
	if hs, ok := s.cfg.Hosts[name]; ok {
		for _, a := range hs {
			a = a.Unmap()
			if network == "ip" || (network == "ip4") == a.Is4() {
				addrs = append(addrs, a)
			}
		}
		return addrs, !s.cfg.Policy.BlockPrivate, nil
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.LookupTimeout)
	defer cancel()
	res, err := s.cfg.Resolver.LookupNetIP(ctx, network, name)
	for _, a := range res {
		addrs = append(addrs, a.Unmap())
	}
	return addrs, false, err
}

func addrRR(name string, a netip.Addr) dns.RR {
	hdr := dns.RR_Header{Name: name, Class: dns.ClassINET, Ttl: dnsTTL}
	if a.Is4() {
		hdr.Rrtype = dns.TypeA
		return &dns.A{Hdr: hdr, A: a.AsSlice()}
	}
	hdr.Rrtype = dns.TypeAAAA
	return &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()}
}
