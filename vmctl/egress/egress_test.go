package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/miekg/dns"
	"go.uber.org/goleak"
)

// requireLowPorts: the service binds port 53 (and 80/443 for bare names).
func requireLowPorts(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_unprivileged_port_start")
	if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n <= 53 {
		return
	}
	testenv.SkipOrFail(t, "egress binds port 53: run as root, or set net.ipv4.ip_unprivileged_port_start=0")
}

// loopback returns a random address in 127.64.0.0/10 (any 127.x works on
// Linux), so tests never collide with each other or with host services.
func loopback() netip.Addr {
	return netip.AddrFrom4([4]byte{127, byte(64 + rand.IntN(64)), byte(rand.IntN(256)), byte(1 + rand.IntN(254))})
}

// fakeResolver answers from a map and counts calls.
type fakeResolver struct {
	mu    sync.Mutex
	m     map[string][]netip.Addr
	calls []string
}

func (f *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, network+" "+host)
	addrs, ok := f.m[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		if network == "ip" || (network == "ip4") == a.Is4() {
			out = append(out, a)
		}
	}
	return out, nil
}

func (f *fakeResolver) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// backend is an HTTP(S) server at addr:port that answers
// "host=<Host> sni=<SNI> path=<path>".
type backend struct {
	srv *httptest.Server
	ln  *countingListener
	ap  netip.AddrPort
}

func newBackend(t testing.TB, addr netip.Addr, port uint16, useTLS bool) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, port).String())
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{ln: &countingListener{Listener: ln}, ap: ln.Addr().(*net.TCPAddr).AddrPort()}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sni := ""
		if r.TLS != nil {
			sni = r.TLS.ServerName
		}
		fmt.Fprintf(w, "host=%s sni=%s path=%s", r.Host, sni, r.URL.Path)
	}))
	b.srv.Listener.Close()
	b.srv.Listener = b.ln
	if useTLS {
		b.srv.StartTLS()
	} else {
		b.srv.Start()
	}
	t.Cleanup(b.srv.Close)
	return b
}

// decisions collects OnDecision calls.
type decisions struct {
	mu sync.Mutex
	ds []Decision
}

func (d *decisions) add(x Decision) {
	d.mu.Lock()
	d.ds = append(d.ds, x)
	d.mu.Unlock()
}

func (d *decisions) last(kind string) Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := len(d.ds) - 1; i >= 0; i-- {
		if d.ds[i].Kind == kind {
			return d.ds[i]
		}
	}
	return Decision{}
}

type fixture struct {
	h    netip.Addr
	svc  *Service
	res  *fakeResolver
	decs *decisions
}

func start(t testing.TB, allow []string, mod func(*Config)) *fixture {
	t.Helper()
	requireLowPorts(t)
	pol, err := netpolicy.Parse("allowlist", allow)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{h: loopback(), res: &fakeResolver{m: map[string][]netip.Addr{}}, decs: &decisions{}}
	cfg := Config{Addr: f.h, Policy: pol, Resolver: f.res, Hosts: map[string][]netip.Addr{}, OnDecision: f.decs.add}
	if mod != nil {
		mod(&cfg)
	}
	f.svc, err = Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.svc.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

// client sends every request to H (as the guest does after DNS said H).
func (f *fixture) client() *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(f.h.String(), port))
		},
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		DisableKeepAlives: true,
	}
	return &http.Client{Transport: tr}
}

func get(t testing.TB, c *http.Client, url string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func TestProxyHTTPHost(t *testing.T) {
	b := newBackend(t, loopback(), 0, false)
	port := b.ap.Port()
	other := newBackend(t, loopback(), 0, false)
	f := start(t, []string{"allowed.test:" + itoa(port), "*.wild.test:" + itoa(other.ap.Port())}, func(c *Config) {
		c.Hosts["Allowed.Test"] = []netip.Addr{b.ap.Addr()}
		c.Hosts["other.test"] = []netip.Addr{b.ap.Addr()}
		c.Hosts["a.wild.test"] = []netip.Addr{other.ap.Addr()}
	})
	c := f.client()

	code, body, err := get(t, c, fmt.Sprintf("http://allowed.test:%d/hello", port))
	if err != nil || code != 200 || body != fmt.Sprintf("host=allowed.test:%d sni= path=/hello", port) {
		t.Fatalf("allowed: %d %q %v", code, body, err)
	}
	if d := f.decs.last(KindProxy); !d.Allowed || d.Name != "allowed.test" || d.Port != port || d.Upstream != b.ap || d.Reason != "allowed" || d.Guest.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("decision %+v", d)
	}
	code, body, err = get(t, c, fmt.Sprintf("http://a.wild.test:%d/w", other.ap.Port()))
	if err != nil || code != 200 || body != fmt.Sprintf("host=a.wild.test:%d sni= path=/w", other.ap.Port()) {
		t.Fatalf("wildcard: %d %q %v", code, body, err)
	}
	if n := b.ln.n.Load(); n != 1 {
		t.Fatalf("backend accepted %d connections, want 1", n)
	}

	// An unlisted name, an allowed name on another rule's port, and the
	// wildcard's apex: 403 and nothing reaches a backend.
	for _, tc := range []struct {
		url, name string
		port      uint16
	}{
		{fmt.Sprintf("http://other.test:%d/x", port), "other.test", port},
		{fmt.Sprintf("http://allowed.test:%d/x", other.ap.Port()), "allowed.test", other.ap.Port()},
		{fmt.Sprintf("http://wild.test:%d/x", other.ap.Port()), "wild.test", other.ap.Port()},
	} {
		code, body, err = get(t, c, tc.url)
		want := fmt.Sprintf("agentbox: %s port %d is not in this sandbox's network allowlist\n", tc.name, tc.port)
		if err != nil || code != 403 || body != want {
			t.Errorf("%s: %d %q %v, want 403 %q", tc.url, code, body, err, want)
		}
		if d := f.decs.last(KindProxy); d.Allowed || d.Name != tc.name || d.Reason != "not in allowlist" {
			t.Errorf("decision %+v", d)
		}
	}
	if n, m := b.ln.n.Load(), other.ln.n.Load(); n != 1 || m != 1 {
		t.Errorf("backends accepted %d and %d connections, want 1 and 1", n, m)
	}
	if calls := f.res.Calls(); len(calls) != 0 {
		t.Errorf("resolver called for Hosts names: %q", calls)
	}
}

func TestProxyTLSSNI(t *testing.T) {
	b := newBackend(t, loopback(), 0, true)
	port := b.ap.Port()
	f := start(t, []string{"secure.test:" + itoa(port)}, func(c *Config) {
		c.Hosts["secure.test"] = []netip.Addr{b.ap.Addr()}
		c.Hosts["evil.test"] = []netip.Addr{b.ap.Addr()}
	})
	c := f.client()
	code, body, err := get(t, c, fmt.Sprintf("https://secure.test:%d/s", port))
	if err != nil || code != 200 || body != fmt.Sprintf("host=secure.test:%d sni=secure.test path=/s", port) {
		t.Fatalf("allowed: %d %q %v", code, body, err)
	}
	if _, _, err := get(t, c, fmt.Sprintf("https://evil.test:%d/s", port)); err == nil {
		t.Fatalf("evil.test over TLS: no error")
	}
	if d := f.decs.last(KindProxy); d.Allowed || d.Name != "evil.test" {
		t.Errorf("decision %+v", d)
	}
	// No SNI at all (a client dialing an IP).
	conn, err := net.Dial("tcp", netip.AddrPortFrom(f.h, port).String())
	if err != nil {
		t.Fatal(err)
	}
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true})
	if err := tc.Handshake(); err == nil {
		t.Errorf("TLS without SNI: handshake succeeded")
	}
	tc.Close()
	if d := f.decs.last(KindProxy); d.Allowed || d.Reason != "no SNI or Host: TLS ClientHello without SNI" {
		t.Errorf("decision %+v", d)
	}
	if n := b.ln.n.Load(); n != 1 {
		t.Errorf("backend accepted %d connections, want 1", n)
	}
}

// TestProxyBareName: a bare NAME opens 80 (HTTP Host) and 443 (TLS SNI).
func TestProxyBareName(t *testing.T) {
	ba := loopback()
	plain := newBackend(t, ba, 80, false)
	secure := newBackend(t, ba, 443, true)
	f := start(t, []string{"bare.test"}, func(c *Config) { c.Hosts["bare.test"] = []netip.Addr{ba} })
	if got := f.svc.Ports(); !slices.Equal(got, []uint16{80, 443}) {
		t.Errorf("Ports() = %v", got)
	}
	c := f.client()
	if code, body, err := get(t, c, "http://bare.test/p"); err != nil || code != 200 || body != "host=bare.test sni= path=/p" {
		t.Errorf("http: %d %q %v", code, body, err)
	}
	if code, body, err := get(t, c, "https://bare.test/q"); err != nil || code != 200 || body != "host=bare.test sni=bare.test path=/q" {
		t.Errorf("https: %d %q %v", code, body, err)
	}
	if plain.ln.n.Load() != 1 || secure.ln.n.Load() != 1 {
		t.Errorf("accepts %d %d", plain.ln.n.Load(), secure.ln.n.Load())
	}
}

func TestProxyRawTCPClosed(t *testing.T) {
	b := newBackend(t, loopback(), 0, false)
	port := b.ap.Port()
	f := start(t, []string{"raw.test:" + itoa(port)}, func(c *Config) {
		c.Hosts["raw.test"] = []netip.Addr{b.ap.Addr()}
		c.PeekTimeout = 200 * time.Millisecond
	})
	for _, send := range []string{
		"SSH-2.0-OpenSSH_9.6\r\n",
		"GET / HTTP/1.0\r\n\r\n", // HTTP without Host: 403
		"",                       // silent client: closed after PeekTimeout
		"CONNECT raw.test:443 HTTP/1.1\r\nHost: raw.test:443\r\n\r\n",
	} {
		conn, err := net.Dial("tcp", netip.AddrPortFrom(f.h, port).String())
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(conn, send)
		got, err := io.ReadAll(conn)
		conn.Close()
		want := ""
		if strings.HasPrefix(send, "GET") {
			want = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 86\r\nConnection: close\r\n\r\n" +
				"agentbox: the request has no Host header; this sandbox reaches only allowlisted names\n"
		}
		if strings.HasPrefix(send, "CONNECT") {
			want = "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 65\r\nConnection: close\r\n\r\n" +
				"agentbox: CONNECT is not supported: connect to the name directly\n"
		}
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%q: read: %v", send, err)
		}
		if string(got) != want {
			t.Errorf("%q: got %q, want %q", send, got, want)
		}
		if d := f.decs.last(KindProxy); d.Allowed || !strings.HasPrefix(d.Reason, "no SNI or Host") {
			t.Errorf("%q: decision %+v", send, d)
		}
	}
	if n := b.ln.n.Load(); n != 0 {
		t.Errorf("backend accepted %d connections, want 0", n)
	}
}

// TestProxyRebinding: an allowed name whose real resolution is loopback is
// refused; the same address from Hosts is trusted.
func TestProxyRebinding(t *testing.T) {
	b := newBackend(t, loopback(), 0, false)
	port := b.ap.Port()
	f := start(t, []string{"rebind.test:" + itoa(port), "rebind6.test:" + itoa(port), "gone.test:" + itoa(port)}, nil)
	f.res.m["rebind.test"] = []netip.Addr{b.ap.Addr()}
	f.res.m["rebind6.test"] = []netip.Addr{netip.MustParseAddr("::1"), netip.MustParseAddr("::ffff:127.0.0.1")}
	c := f.client()
	for _, name := range []string{"rebind.test", "rebind6.test"} {
		code, body, err := get(t, c, fmt.Sprintf("http://%s:%d/", name, port))
		want := fmt.Sprintf("agentbox: %s resolves only to addresses a sandbox may not reach\n", name)
		if err != nil || code != 403 || body != want {
			t.Errorf("%s: %d %q %v", name, code, body, err)
		}
	}
	code, body, err := get(t, c, fmt.Sprintf("http://gone.test:%d/", port))
	if err != nil || code != 502 || body != "agentbox: gone.test could not be resolved on the host\n" {
		t.Errorf("gone.test: %d %q %v", code, body, err)
	}
	if n := b.ln.n.Load(); n != 0 {
		t.Errorf("backend accepted %d connections, want 0", n)
	}
	if calls := f.res.Calls(); !slices.Equal(calls, []string{"ip rebind.test", "ip rebind6.test", "ip gone.test"}) {
		t.Errorf("resolver calls %q", calls)
	}
}

func TestForbiddenAddrs(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true, "::ffff:127.0.0.1": true,
		"169.254.169.254": true, "fe80::1": true, "224.0.0.1": true, "ff02::1": true,
		"0.0.0.0": true, "0.1.2.3": true, "::": true, "255.255.255.255": true,
		"100.100.100.200": true, "100.64.0.1": true, "fd00:ec2::254": true,
		"10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "fd12::1": true,
		"192.0.2.10": false, "198.51.100.7": false, "2001:db8::1": false, "8.8.8.8": false,
	} {
		if got := forbiddenForProxy(netip.MustParseAddr(s)); got != want {
			t.Errorf("forbiddenForProxy(%s) = %v, want %v", s, got, want)
		}
	}
	for s, want := range map[string]bool{"10.1.2.3": false, "192.0.2.10": false, "127.0.0.1": true, "169.254.169.254": true, "100.100.100.200": true} {
		if got := forbiddenAlways(netip.MustParseAddr(s)); got != want {
			t.Errorf("forbiddenAlways(%s) = %v, want %v", s, got, want)
		}
	}
}

func exchange(t testing.TB, net string, h netip.Addr, name string, qtype uint16, mod func(*dns.Msg)) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	if mod != nil {
		mod(m)
	}
	c := &dns.Client{Net: net, Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, netip.AddrPortFrom(h, 53).String())
	if err != nil {
		t.Fatalf("%s %s %s: %v", net, name, dns.TypeToString[qtype], err)
	}
	return r
}

func answers(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		out = append(out, rr.String())
	}
	return out
}

func TestDNS(t *testing.T) {
	f := start(t, []string{"allowed.test", "api.allowed.test:8443", "*.wild.test:443", "host:" + itoa(freePort(t)), "198.51.100.0/24:80"}, nil)
	h := f.h.String()
	for _, tc := range []struct {
		net   string
		name  string
		qtype uint16
		rcode int
		ans   []string
	}{
		{"udp", "allowed.test", dns.TypeA, dns.RcodeSuccess, []string{"allowed.test.\t60\tIN\tA\t" + h}},
		{"udp", "ALLOWED.Test", dns.TypeA, dns.RcodeSuccess, []string{"ALLOWED.Test.\t60\tIN\tA\t" + h}},
		{"tcp", "allowed.test", dns.TypeA, dns.RcodeSuccess, []string{"allowed.test.\t60\tIN\tA\t" + h}},
		{"udp", "allowed.test", dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"udp", "allowed.test", dns.TypeTXT, dns.RcodeSuccess, nil},
		{"udp", "allowed.test", dns.TypeHTTPS, dns.RcodeSuccess, nil},
		{"udp", "api.allowed.test", dns.TypeA, dns.RcodeSuccess, []string{"api.allowed.test.\t60\tIN\tA\t" + h}},
		{"udp", "x.y.wild.test", dns.TypeA, dns.RcodeSuccess, []string{"x.y.wild.test.\t60\tIN\tA\t" + h}},
		{"udp", netpolicy.HostAlias, dns.TypeA, dns.RcodeSuccess, []string{netpolicy.HostAlias + ".\t60\tIN\tA\t" + h}},
		{"tcp", netpolicy.HostAlias, dns.TypeAAAA, dns.RcodeSuccess, nil},
		{"udp", "wild.test", dns.TypeA, dns.RcodeNameError, nil},
		{"udp", "www.allowed.test", dns.TypeA, dns.RcodeNameError, nil},
		{"udp", "unlisted.test", dns.TypeA, dns.RcodeNameError, nil},
		{"tcp", "unlisted.test", dns.TypeAAAA, dns.RcodeNameError, nil},
		{"udp", "c2VjcmV0IGRhdGE.exfil.evil.test", dns.TypeTXT, dns.RcodeNameError, nil},
		{"udp", "7.100.51.198.in-addr.arpa", dns.TypePTR, dns.RcodeNameError, nil},
		{"udp", "allowed.test", dns.TypeANY, dns.RcodeRefused, nil},
		{"tcp", "allowed.test", dns.TypeAXFR, dns.RcodeRefused, nil},
	} {
		r := exchange(t, tc.net, f.h, tc.name, tc.qtype, nil)
		if r.Rcode != tc.rcode || !slices.Equal(answers(r), tc.ans) || r.RecursionAvailable || len(r.Question) != 1 {
			t.Errorf("%s %s %s: rcode %s answers %q, want %s %q", tc.net, tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[r.Rcode], answers(r), dns.RcodeToString[tc.rcode], tc.ans)
		}
	}
	r := exchange(t, "udp", f.h, "allowed.test", dns.TypeA, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })
	if r.Rcode != dns.RcodeRefused {
		t.Errorf("CHAOS: %s", dns.RcodeToString[r.Rcode])
	}
	r = exchange(t, "udp", f.h, "allowed.test", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(4096, false) })
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.IsEdns0() == nil {
		t.Errorf("EDNS: %v", r)
	}
	if d := f.decs.last(KindDNS); !d.Allowed || d.Name != "allowed.test" || d.Port != 53 || d.Guest.Addr() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("decision %+v", d)
	}
	if calls := f.res.Calls(); len(calls) != 0 {
		t.Errorf("resolver called: %q", calls)
	}
}

// TestDNSForwardAll: open mode resolves any name upstream, minus forbidden addresses.
func TestDNSForwardAll(t *testing.T) {
	requireLowPorts(t)
	res := &fakeResolver{m: map[string][]netip.Addr{
		"public.test": {netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")},
		"mixed.test":  {netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.0.2.11")},
		"loop.test":   {netip.MustParseAddr("127.0.0.1")},
		"meta.test":   {netip.MustParseAddr("169.254.169.254")},
		"lan.test":    {netip.MustParseAddr("10.1.2.3")},
	}}
	h := loopback()
	_, err := Start(context.Background(), Config{Addr: h, Policy: netpolicy.Policy{Mode: netpolicy.ModeAllowlist}, ForwardAll: true})
	if err == nil || !strings.Contains(err.Error(), "mode open only") {
		t.Fatalf("ForwardAll with allowlist: %v", err)
	}
	svc, err := Start(context.Background(), Config{Addr: h, Policy: netpolicy.Policy{Mode: netpolicy.ModeOpen}, ForwardAll: true, Resolver: res,
		Hosts: map[string][]netip.Addr{"pinned.test": {netip.MustParseAddr("127.0.0.9")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	for _, tc := range []struct {
		name  string
		qtype uint16
		rcode int
		ans   []string
	}{
		{"public.test", dns.TypeA, dns.RcodeSuccess, []string{"public.test.\t60\tIN\tA\t192.0.2.10"}},
		{"public.test", dns.TypeAAAA, dns.RcodeSuccess, []string{"public.test.\t60\tIN\tAAAA\t2001:db8::10"}},
		{"mixed.test", dns.TypeA, dns.RcodeSuccess, []string{"mixed.test.\t60\tIN\tA\t192.0.2.11"}},
		{"loop.test", dns.TypeA, dns.RcodeSuccess, nil},
		{"meta.test", dns.TypeA, dns.RcodeSuccess, nil},
		{"lan.test", dns.TypeA, dns.RcodeSuccess, []string{"lan.test.\t60\tIN\tA\t10.1.2.3"}},
		{"pinned.test", dns.TypeA, dns.RcodeSuccess, []string{"pinned.test.\t60\tIN\tA\t127.0.0.9"}},
		{"nowhere.test", dns.TypeA, dns.RcodeNameError, nil},
		{"public.test", dns.TypeMX, dns.RcodeSuccess, nil},
		{netpolicy.HostAlias, dns.TypeA, dns.RcodeNameError, nil}, // no host:PORT rule
	} {
		r := exchange(t, "udp", h, tc.name, tc.qtype, nil)
		if r.Rcode != tc.rcode || !slices.Equal(answers(r), tc.ans) {
			t.Errorf("%s %s: rcode %s answers %q, want %s %q", tc.name, dns.TypeToString[tc.qtype],
				dns.RcodeToString[r.Rcode], answers(r), dns.RcodeToString[tc.rcode], tc.ans)
		}
	}
	want := []string{"ip4 public.test", "ip6 public.test", "ip4 mixed.test", "ip4 loop.test", "ip4 meta.test", "ip4 lan.test", "ip4 nowhere.test", "ip4 " + netpolicy.HostAlias}
	if calls := res.Calls(); !slices.Equal(calls, want) {
		t.Errorf("resolver calls %q, want %q", calls, want)
	}
}

// echoServer at 127.0.0.1:0 reads until EOF, then writes "got:"+data and closes.
func echoServer(t testing.TB) (uint16, *countingListener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := cl.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				io.WriteString(c, "got:"+string(b))
			})
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return uint16(ln.Addr().(*net.TCPAddr).Port), cl
}

func freePort(t testing.TB) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func TestHostForward(t *testing.T) {
	port, ln := echoServer(t)
	otherPort, otherLn := echoServer(t)
	f := start(t, []string{"host:" + itoa(port)}, nil)
	conn, err := net.Dial("tcp", netip.AddrPortFrom(f.h, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "ping\x00\xff")
	conn.(*net.TCPConn).CloseWrite() // half-close: the echo answers after EOF
	got, err := io.ReadAll(conn)
	if err != nil || string(got) != "got:ping\x00\xff" {
		t.Errorf("forward: %q %v", got, err)
	}
	if d := f.decs.last(KindHost); !d.Allowed || d.Port != port || d.Name != netpolicy.HostAlias || d.Upstream.String() != "127.0.0.1:"+itoa(port) {
		t.Errorf("decision %+v", d)
	}
	if _, err := net.Dial("tcp", netip.AddrPortFrom(f.h, otherPort).String()); err == nil {
		t.Errorf("unlisted host port %d reachable at H", otherPort)
	}
	for _, p := range []uint16{80, 443, 8080} {
		if c, err := net.Dial("tcp", netip.AddrPortFrom(f.h, p).String()); err == nil {
			c.Close()
			t.Errorf("port %d listening at H", p)
		}
	}
	if ln.n.Load() != 1 || otherLn.n.Load() != 0 {
		t.Errorf("accepts %d %d", ln.n.Load(), otherLn.n.Load())
	}
}

func TestConnLimit(t *testing.T) {
	port, ln := echoServer(t)
	f := start(t, []string{"host:" + itoa(port)}, func(c *Config) { c.MaxConns = 2 })
	dial := func() net.Conn {
		c, err := net.Dial("tcp", netip.AddrPortFrom(f.h, port).String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	// Two held connections; wait until both reached the echo server.
	held := []net.Conn{dial(), dial()}
	for ln.n.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	third := dial()
	if b, _ := io.ReadAll(third); len(b) != 0 {
		t.Errorf("third connection got %q", b)
	}
	third.Close()
	if d := f.decs.last(KindHost); d.Allowed || d.Reason != "connection limit" {
		t.Errorf("decision %+v", d)
	}
	if n := ln.n.Load(); n != 2 {
		t.Errorf("echo accepted %d, want 2", n)
	}
	for _, c := range held {
		c.(*net.TCPConn).CloseWrite()
		if b, err := io.ReadAll(c); string(b) != "got:" || err != nil {
			t.Errorf("held: %q %v", b, err)
		}
		c.Close()
	}
}

func TestStartErrors(t *testing.T) {
	requireLowPorts(t)
	allow, _ := netpolicy.Parse("allowlist", nil)
	for _, tc := range []struct {
		cfg Config
		msg string
	}{
		{Config{Policy: allow}, "want the host side of the sandbox's tap"},
		{Config{Addr: netip.IPv4Unspecified(), Policy: allow}, "want the host side"},
		{Config{Addr: loopback()}, `network mode "" has no network`},
		{Config{Addr: loopback(), Policy: netpolicy.Policy{Mode: "allowlist", Allow: []netpolicy.Rule{{Kind: netpolicy.RuleHost, Port: 53}}}}, "port 53"},
		{Config{Addr: netip.MustParseAddr("192.0.2.1"), Policy: allow}, "egress: DNS: listen udp 192.0.2.1:53"},
	} {
		s, err := Start(context.Background(), tc.cfg)
		if err == nil {
			s.Close()
			t.Errorf("%+v: no error", tc.cfg)
		} else if !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.msg)
		}
	}
	// A taken port: the DNS sockets bound before it are released again.
	h := loopback()
	busy, err := net.Listen("tcp", netip.AddrPortFrom(h, 8443).String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	pol, _ := netpolicy.Parse("allowlist", []string{"x.test:8443"})
	if _, err := Start(context.Background(), Config{Addr: h, Policy: pol}); err == nil || !strings.Contains(err.Error(), "egress: port 8443: ") {
		t.Fatalf("busy port: %v", err)
	}
	s, err := Start(context.Background(), Config{Addr: h, Policy: allow})
	if err != nil {
		t.Fatalf("after a failed start: %v", err)
	}
	s.Close()
}

// TestClose: Close ends open connections, frees every port and leaves no goroutine.
func TestClose(t *testing.T) {
	requireLowPorts(t)
	port, _ := echoServer(t)
	b := newBackend(t, loopback(), 0, false)
	ignore := goleak.IgnoreCurrent()

	h := loopback()
	pol, err := netpolicy.Parse("allowlist", []string{"host:" + itoa(port), "c.test:" + itoa(b.ap.Port())})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := Start(context.Background(), Config{Addr: h, Policy: pol, Hosts: map[string][]netip.Addr{"c.test": {b.ap.Addr()}}})
	if err != nil {
		t.Fatal(err)
	}
	// One spliced connection in flight, one idle DNS-over-TCP connection, one
	// proxy connection still peeking.
	fwd, err := net.Dial("tcp", netip.AddrPortFrom(h, port).String())
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	io.WriteString(fwd, "half")
	dnsConn, err := net.Dial("tcp", netip.AddrPortFrom(h, 53).String())
	if err != nil {
		t.Fatal(err)
	}
	defer dnsConn.Close()
	peek, err := net.Dial("tcp", netip.AddrPortFrom(h, b.ap.Port()).String())
	if err != nil {
		t.Fatal(err)
	}
	defer peek.Close()
	io.WriteString(peek, "GET / HTTP/1.1\r\n")
	r := exchange(t, "udp", h, netpolicy.HostAlias, dns.TypeA, nil)
	if len(r.Answer) != 1 {
		t.Fatalf("DNS: %v", r)
	}

	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, c := range []net.Conn{fwd, peek} {
		if b, _ := io.ReadAll(c); len(b) != 0 && string(b) != "got:half" {
			t.Errorf("after Close read %q", b)
		}
	}
	for _, p := range []uint16{53, port, b.ap.Port()} {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(h, p).String())
		if err != nil {
			t.Errorf("tcp port %d still bound: %v", p, err)
			continue
		}
		ln.Close()
	}
	pc, err := net.ListenPacket("udp", netip.AddrPortFrom(h, 53).String())
	if err != nil {
		t.Errorf("udp 53 still bound: %v", err)
	} else {
		pc.Close()
	}
	fwd.Close()
	peek.Close()
	dnsConn.Close()
	goleak.VerifyNone(t, ignore)
}

// FuzzSniff: sniff never panics, never reads past PeekLimit, and records
// exactly the prefix of the input it consumed.
func FuzzSniff(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"))
	f.Add([]byte("\x16\x03\x01\x00\x05hello"))
	f.Add(clientHello(f, "sni.test"))
	f.Fuzz(func(t *testing.T, in []byte) {
		rec := &recorder{c: strings.NewReader(string(in)), max: PeekLimit}
		name, _, _ := sniff(rec)
		if len(rec.buf) > PeekLimit || !strings.HasPrefix(string(in), string(rec.buf)) {
			t.Fatalf("recorded %d bytes, not a prefix of the input", len(rec.buf))
		}
		if name != "" && !strings.Contains(string(in), name) && !strings.Contains(strings.ToLower(string(in)), strings.ToLower(name)) {
			t.Fatalf("name %q not in input", name)
		}
	})
}

// clientHello returns the bytes a Go TLS client sends first for sni.
func clientHello(t testing.TB, sni string) []byte {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	buf := make([]byte, 5)
	if _, err := io.ReadFull(b, buf); err != nil {
		t.Fatal(err)
	}
	n := int(buf[3])<<8 | int(buf[4])
	rest := make([]byte, n)
	if _, err := io.ReadFull(b, rest); err != nil {
		t.Fatal(err)
	}
	return append(buf, rest...)
}

// TestSniffFragmented: a ClientHello split into 1-byte reads and a
// fragmented HTTP request still give their names, with every byte recorded.
func TestSniffFragmented(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		name string
		http bool
	}{
		{clientHello(t, "frag.test"), "frag.test", false},
		{[]byte("GET /x HTTP/1.1\r\nhOsT: Frag.Test:8080\r\nX: y\r\n\r\nbody"), "Frag.Test", true},
		{[]byte("GET http://abs.test/x HTTP/1.1\r\nHost: other.test\r\n\r\n"), "abs.test", true},
	} {
		rec := &recorder{c: &oneByteReader{r: strings.NewReader(string(tc.in))}, max: PeekLimit}
		name, isHTTP, err := sniff(rec)
		if err != nil || name != tc.name || isHTTP != tc.http {
			t.Errorf("sniff = %q %v %v, want %q %v", name, isHTTP, err, tc.name, tc.http)
		}
		if !strings.HasPrefix(string(tc.in), string(rec.buf)) || len(rec.buf) == 0 {
			t.Errorf("recorded %q", rec.buf)
		}
	}
	// Two Host headers: refused (a backend might pick the other one).
	rec := &recorder{c: strings.NewReader("GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"), max: PeekLimit}
	if name, _, err := sniff(rec); err == nil {
		t.Errorf("two Host headers: %q", name)
	}
	// Header bytes past PeekLimit: refused.
	big := "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", PeekLimit) + "\r\nHost: a.test\r\n\r\n"
	rec = &recorder{c: strings.NewReader(big), max: PeekLimit}
	if name, _, err := sniff(rec); err == nil || len(rec.buf) != PeekLimit {
		t.Errorf("huge header: %q %v, recorded %d", name, err, len(rec.buf))
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

// BenchmarkDownload: an HTTP download of 16 MiB through the proxy vs direct,
// on loopback.
func BenchmarkDownload(b *testing.B) {
	const size = 16 << 20
	payload := strings.Repeat("x", size)
	ba := loopback()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ba, 0).String())
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		io.WriteString(w, payload)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	f := start(b, []string{"bench.test:" + itoa(port)}, func(c *Config) { c.Hosts["bench.test"] = []netip.Addr{ba} })
	direct := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"direct", direct, fmt.Sprintf("http://%s:%d/", ba, port)},
		{"proxied", f.client(), fmt.Sprintf("http://bench.test:%d/", port)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(size)
			for b.Loop() {
				resp, err := bc.c.Get(bc.url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size {
					b.Fatalf("read %d %v", n, err)
				}
			}
		})
	}
}
