package egress

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/miekg/dns"
)

// TestForbiddenEmbedded: addresses that carry an IPv4 address (NAT64,
// 6to4, mapped, ...) are judged as it, in the resolver's and the proxy's
// checks alike; CGNAT and the metadata addresses are never answered.
func TestForbiddenEmbedded(t *testing.T) {
	tenant := netpolicy.Policy{Mode: netpolicy.ModeOpen, BlockPrivate: true}
	for s, want := range map[string][3]bool{ // {forbiddenAlways, forbiddenOpen(tenant), forbiddenForProxy}
		"64:ff9b::a9fe:a9fe":     {true, true, true}, // 169.254.169.254 through NAT64
		"64:ff9b::7f00:1":        {true, true, true},
		"64:ff9b::6464:64c8":     {true, true, true}, // 100.100.100.200
		"64:ff9b::6440:1":        {true, true, true}, // CGNAT
		"2002:a9fe:a9fe::1":      {true, true, true}, // 6to4
		"2002:7f00:1::1":         {true, true, true},
		"::ffff:169.254.169.254": {true, true, true},
		"::ffff:0:a9fe:a9fe":     {true, true, true},
		"64:ff9b:1::1":           {true, true, true}, // local-use NAT64: unknown IPv4
		"100.64.0.1":             {true, true, true},
		"100.100.100.200":        {true, true, true},
		"10.1.2.3":               {false, true, true},
		"64:ff9b::a01:203":       {false, true, true}, // 10.1.2.3 through NAT64
		"2002:c0a8:101::1":       {false, true, true}, // 192.168.1.1 through 6to4
		"fd12::1":                {false, true, true},
		"198.51.100.7":           {false, false, false},
		"64:ff9b::c633:6407":     {false, false, false}, // 198.51.100.7 through NAT64
		"2002:c633:6407::1":      {false, false, false},
		"2001:db8::1":            {false, false, false},
	} {
		a := netip.MustParseAddr(s)
		if got := [3]bool{forbiddenAlways(a), forbiddenOpen(tenant, a), forbiddenForProxy(a)}; got != want {
			t.Errorf("%s: forbiddenAlways, forbiddenOpen(block_private), forbiddenForProxy = %v, want %v", s, got, want)
		}
	}
	// The host's own address, through NAT64 too.
	lo := netip.MustParseAddr("127.0.0.1")
	if !isHostAddr(lo) || !isHostAddr(netip.MustParseAddr("64:ff9b::7f00:1")) || isHostAddr(netip.MustParseAddr("64:ff9b::c633:6407")) {
		t.Error("isHostAddr does not judge NAT64 forms by their IPv4 address")
	}
}

// TestDNSForwardBlockPrivate: open mode with BlockPrivate (a tenant's
// sandbox) answers no private, CGNAT or ULA address, as the tap drops them;
// without it, private answers stay (open mode reaches them) but CGNAT and
// NAT64 forms of forbidden addresses never come back.
func TestDNSForwardBlockPrivate(t *testing.T) {
	requireLowPorts(t)
	res := &fakeResolver{m: map[string][]netip.Addr{
		"public.test": {netip.MustParseAddr("192.0.2.10")},
		"lan.test":    {netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd12::3")},
		"cgnat.test":  {netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("100.64.0.1")},
		"nat64.test":  {netip.MustParseAddr("64:ff9b::a9fe:a9fe"), netip.MustParseAddr("64:ff9b::a01:203"), netip.MustParseAddr("64:ff9b::c000:20a")},
	}}
	for _, tc := range []struct {
		block bool
		want  map[string][]string
	}{
		{false, map[string][]string{
			"public.test A": {"192.0.2.10"}, "lan.test A": {"10.1.2.3"}, "lan.test AAAA": {"fd12::3"},
			"cgnat.test A": nil, "nat64.test AAAA": {"64:ff9b::a01:203", "64:ff9b::c000:20a"},
		}},
		{true, map[string][]string{
			"public.test A": {"192.0.2.10"}, "lan.test A": nil, "lan.test AAAA": nil,
			"cgnat.test A": nil, "nat64.test AAAA": {"64:ff9b::c000:20a"},
		}},
	} {
		h := loopback()
		svc, err := Start(context.Background(), Config{Addr: h, Policy: netpolicy.Policy{Mode: netpolicy.ModeOpen, BlockPrivate: tc.block}, ForwardAll: true, Resolver: res})
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range tc.want {
			name, typ, _ := strings.Cut(q, " ")
			r := exchange(t, "udp", h, name, dns.StringToType[typ], nil)
			var got []string
			for _, rr := range r.Answer {
				switch rr := rr.(type) {
				case *dns.A:
					got = append(got, rr.A.String())
				case *dns.AAAA:
					got = append(got, rr.AAAA.String())
				}
			}
			if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
				t.Errorf("block_private %v: %s: %s %q, want NOERROR %q", tc.block, q, dns.RcodeToString[r.Rcode], got, want)
			}
		}
		if err := svc.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// upstream is a DNS server on 127.0.0.1 (miekg/dns) that answers A and
// AAAA from a map and records every name it is asked, standing in for the
// host's resolver and the name servers behind it.
type upstream struct {
	mu    sync.Mutex
	m     map[string][]netip.Addr
	asked []string
	addr  string
}

func newUpstream(t *testing.T, m map[string][]netip.Addr) *upstream {
	t.Helper()
	u := &upstream{m: m}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.addr = pc.LocalAddr().String()
	started := make(chan struct{})
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(u.serve), NotifyStartedFunc: func() { close(started) }}
	done := make(chan struct{})
	go func() { defer close(done); srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return u
}

func (u *upstream) serve(w dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	u.mu.Lock()
	u.asked = append(u.asked, name)
	addrs, ok := u.m[name]
	u.mu.Unlock()
	if !ok {
		m.Rcode = dns.RcodeNameError
	}
	for _, a := range addrs {
		if (q.Qtype == dns.TypeA && a.Is4()) || (q.Qtype == dns.TypeAAAA && a.Is6()) {
			m.Answer = append(m.Answer, addrRR(q.Name, a))
		}
	}
	w.WriteMsg(m)
}

// names returns the distinct names asked, sorted.
func (u *upstream) names() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := slices.Clone(u.asked)
	slices.Sort(out)
	return slices.Compact(out)
}

// resolver is a Go resolver that asks only u.
func (u *upstream) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", u.addr)
	}}
}

// TestDNSStrict: under dns strict an allowed name is answered (with H)
// only once the host has resolved it to an address the proxy would
// connect to; the upstream is asked only names the policy lists, never a
// name the guest made up; a wildcard policy is refused. The default mode,
// for contrast, answers an allowed name without asking upstream at all,
// and its wildcard rules let the proxy resolve guest-chosen names.
func TestDNSStrict(t *testing.T) {
	requireLowPorts(t)
	up := newUpstream(t, map[string][]netip.Addr{
		"public.test": {netip.MustParseAddr("192.0.2.10")},
		"v6only.test": {netip.MustParseAddr("2001:db8::10")},
		"lan.test":    {netip.MustParseAddr("10.1.2.3")},
		"meta.test":   {netip.MustParseAddr("169.254.169.254")},
		"nat64.test":  {netip.MustParseAddr("64:ff9b::a9fe:a9fe")},
		"cgnat.test":  {netip.MustParseAddr("100.100.100.200")},
	})
	port := freePort(t)
	pol, err := netpolicy.Parse("allowlist", []string{"public.test", "v6only.test", "lan.test", "meta.test", "nat64.test", "cgnat.test", "gone.test", "pinned.test", "host:" + itoa(port)})
	if err != nil {
		t.Fatal(err)
	}
	if pol, err = pol.WithDNS("strict"); err != nil {
		t.Fatal(err)
	}
	decs := &decisions{}
	h := loopback()
	svc, err := Start(context.Background(), Config{Addr: h, Policy: pol, Resolver: up.resolver(), OnDecision: decs.add,
		Hosts: map[string][]netip.Addr{"pinned.test": {netip.MustParseAddr("127.0.0.9")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	hA := []string{"%s.\t60\tIN\tA\t" + h.String()}
	for _, tc := range []struct {
		name   string
		qtype  uint16
		rcode  int
		ans    []string
		reason string
	}{
		{"public.test", dns.TypeA, dns.RcodeSuccess, hA, "allowed"},
		{"public.test", dns.TypeAAAA, dns.RcodeSuccess, nil, "allowed"},
		{"v6only.test", dns.TypeA, dns.RcodeSuccess, hA, "allowed"}, // reachable through the proxy over IPv6
		{"pinned.test", dns.TypeA, dns.RcodeSuccess, hA, "allowed"},
		{netpolicy.HostAlias, dns.TypeA, dns.RcodeSuccess, hA, "allowed"},
		{"lan.test", dns.TypeA, dns.RcodeNameError, nil, "dns strict: resolves only to addresses the sandbox may not reach"},
		{"meta.test", dns.TypeA, dns.RcodeNameError, nil, "dns strict: resolves only to addresses the sandbox may not reach"},
		{"nat64.test", dns.TypeA, dns.RcodeNameError, nil, "dns strict: resolves only to addresses the sandbox may not reach"},
		{"cgnat.test", dns.TypeA, dns.RcodeNameError, nil, "dns strict: resolves only to addresses the sandbox may not reach"},
		{"gone.test", dns.TypeA, dns.RcodeNameError, nil, "dns strict: no such name upstream"},
		{"c2VjcmV0.unlisted.test", dns.TypeA, dns.RcodeNameError, nil, "not in allowlist"},
	} {
		r := exchange(t, "udp", h, tc.name, tc.qtype, nil)
		var want []string
		for _, a := range tc.ans {
			want = append(want, strings.Replace(a, "%s", tc.name, 1))
		}
		d := decs.last(KindDNS)
		if r.Rcode != tc.rcode || !slices.Equal(answers(r), want) || d.Reason != tc.reason || d.Allowed != (tc.reason == "allowed") {
			t.Errorf("%s %s: %s %q (decision %q allowed %v), want %s %q (%q)", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[r.Rcode], answers(r), d.Reason, d.Allowed, dns.RcodeToString[tc.rcode], want, tc.reason)
		}
	}
	// The upstream heard only names the policy lists (pinned.test and the
	// host alias are answered on the host), never the guest's own.
	var asked []string
	for _, n := range up.names() {
		if strings.HasSuffix(n, ".test") { // a host resolver's search domains may add other tries
			asked = append(asked, n)
		}
	}
	if want := []string{"cgnat.test", "gone.test", "lan.test", "meta.test", "nat64.test", "public.test", "v6only.test"}; !slices.Equal(asked, want) {
		t.Errorf("upstream asked %q, want %q", asked, want)
	}
	for _, n := range up.names() {
		if strings.Contains(n, "unlisted") || strings.Contains(n, "pinned") {
			t.Errorf("upstream asked %q", n)
		}
	}

	// Strict with a wildcard, or in open mode, is refused.
	for _, p := range []netpolicy.Policy{
		{Mode: netpolicy.ModeAllowlist, Allow: []netpolicy.Rule{{Kind: netpolicy.RuleName, Name: "*.wild.test"}}, DNS: netpolicy.DNSStrict},
		{Mode: netpolicy.ModeOpen, DNS: netpolicy.DNSStrict},
	} {
		if svc, err := Start(context.Background(), Config{Addr: loopback(), Policy: p, ForwardAll: p.Mode == netpolicy.ModeOpen}); err == nil || !strings.Contains(err.Error(), "dns strict") {
			if svc != nil {
				svc.Close()
			}
			t.Errorf("Start(%s): %v, want refused", p, err)
		}
	}
}

// TestDNSDefaultWildcardLeaks documents why dns strict exists: by default
// a wildcard rule lets the guest make the host resolve any name below it
// (data in the name), through the proxy's lookup of the SNI or Host, even
// though the connection that follows is refused.
func TestDNSDefaultWildcardLeaks(t *testing.T) {
	requireLowPorts(t)
	up := newUpstream(t, map[string][]netip.Addr{"lan.wild.test": {netip.MustParseAddr("10.1.2.3")}})
	port := freePort(t)
	f := start(t, []string{"*.wild.test:" + itoa(port)}, func(c *Config) { c.Resolver = up.resolver() })
	code, body, err := get(t, f.client(), "http://c2VjcmV0.wild.test:"+itoa(port)+"/")
	if err != nil || code != 502 || body != "agentbox: c2vjcmv0.wild.test could not be resolved on the host\n" {
		t.Errorf("GET c2VjcmV0.wild.test: %d %q %v, want 502 (no such name upstream)", code, body, err)
	}
	r := exchange(t, "udp", f.h, "other.wild.test", dns.TypeA, nil)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("default mode: other.wild.test: %s %q, want H", dns.RcodeToString[r.Rcode], answers(r))
	}
	if !slices.Contains(up.names(), "c2vjcmv0.wild.test") {
		t.Errorf("upstream asked %q: want the guest's name c2vjcmv0.wild.test (the channel dns strict closes)", up.names())
	}
	if slices.Contains(up.names(), "other.wild.test") {
		t.Errorf("upstream asked %q: the default resolver answers allowed names without asking", up.names())
	}
}

// TestHostsUntrustedForBlockPrivate: an operator's pin (Config.Hosts)
// into loopback or a private network is trusted for the admin's sandbox
// but checked like any answer for a BlockPrivate (tenant's) one: by the
// proxy, by dns strict and by open mode's resolver.
func TestHostsUntrustedForBlockPrivate(t *testing.T) {
	requireLowPorts(t)
	b := newBackend(t, netip.MustParseAddr("127.0.0.1"), 0, false)
	port := b.ap.Port()
	pins := map[string][]netip.Addr{"pinned.test": {b.ap.Addr()}, "lan.test": {netip.MustParseAddr("10.1.2.3")}}
	for _, block := range []bool{false, true} {
		f := start(t, []string{"pinned.test:" + itoa(port)}, func(c *Config) {
			c.Hosts = pins
			c.Policy.BlockPrivate = block
		})
		code, body, err := get(t, f.client(), "http://pinned.test:"+itoa(port)+"/x")
		want := [2]any{200, "host=pinned.test:" + itoa(port) + " sni= path=/x"}
		if block {
			want = [2]any{403, "agentbox: pinned.test resolves only to addresses a sandbox may not reach\n"}
		}
		if err != nil || code != want[0] || body != want[1] {
			t.Errorf("block_private %v: GET pinned.test: %d %q %v, want %v", block, code, body, err, want)
		}

		h := loopback()
		svc, err := Start(context.Background(), Config{Addr: h, Policy: netpolicy.Policy{Mode: netpolicy.ModeOpen, BlockPrivate: block}, ForwardAll: true,
			Resolver: &fakeResolver{}, Hosts: pins})
		if err != nil {
			t.Fatal(err)
		}
		r := exchange(t, "udp", h, "lan.test", dns.TypeA, nil)
		if n := len(r.Answer); n != map[bool]int{false: 1, true: 0}[block] {
			t.Errorf("block_private %v: open mode answers lan.test (pinned to 10.1.2.3) with %q", block, answers(r))
		}
		svc.Close()
	}
	if n := b.ln.n.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want 1 (the admin's)", n)
	}
}
