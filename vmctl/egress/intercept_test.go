package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/secrets"
)

const (
	realValue = "sk-real-0123456789"
	otherReal = "other-real-value"
)

// tlsBackend is an HTTPS server for names, its certificate signed by an
// "upstream" CA (a secrets.Set's, reused as a plain CA), that records
// the Authorization header and Host of every request and echoes the
// Authorization back in X-Seen.
type tlsBackend struct {
	ap    netip.AddrPort
	roots *x509.CertPool
	conns sync.Map // remote address → true

	mu   sync.Mutex
	seen []string // "host auth"
}

func newTLSBackend(t testing.TB, names ...string) *tlsBackend {
	t.Helper()
	pol, _ := netpolicy.Parse("allowlist", names)
	up, err := secrets.New([]secrets.Spec{{Name: "UP", Value: "x", Hosts: names}}, pol, "upstream")
	if err != nil {
		t.Fatal(err)
	}
	iss, err := up.Issuer()
	if err != nil {
		t.Fatal(err)
	}
	b := &tlsBackend{roots: x509.NewCertPool()}
	b.roots.AppendCertsFromPEM([]byte(up.CACert))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		b.mu.Lock()
		b.seen = append(b.seen, r.Host+" "+auth)
		b.mu.Unlock()
		b.conns.Store(r.RemoteAddr, true)
		w.Header().Set("X-Seen", auth)
		if r.URL.Path == "/big" {
			io.Copy(w, io.LimitReader(zeros{}, 8<<20))
			return
		}
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	}))
	ln, err := net.Listen("tcp", netip.AddrPortFrom(loopback(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener.Close()
	srv.Listener = ln
	srv.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) { return iss.Certificate(h.ServerName) }}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	b.ap = ln.Addr().(*net.TCPAddr).AddrPort()
	return b
}

func (b *tlsBackend) requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// interceptFixture: api.test (bound to API_KEY) and other.test (bound to
// nothing, allowed) behind one egress service; plain.test bound to
// OTHER_KEY only on a third backend.
type interceptFixture struct {
	*fixture
	api, other *tlsBackend
	set        *secrets.Set
	caPool     *x509.CertPool // the sandbox's CA, as the guest trusts it
}

func startIntercept(t testing.TB, withUpstreamCA bool) *interceptFixture {
	api := newTLSBackend(t, "api.test")
	other := newTLSBackend(t, "other.test")
	allow := []string{"api.test:" + itoa(api.ap.Port()), "other.test:" + itoa(other.ap.Port()), "api.test:" + itoa(other.ap.Port())}
	pol, err := netpolicy.Parse("allowlist", allow)
	if err != nil {
		t.Fatal(err)
	}
	set, err := secrets.New([]secrets.Spec{
		{Name: "API_KEY", Value: realValue, Hosts: []string{"api.test"}},
		{Name: "OTHER_KEY", Value: otherReal, Hosts: []string{"api.test"}},
	}, pol, "test")
	if err != nil {
		t.Fatal(err)
	}
	iss, err := set.Issuer()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if withUpstreamCA {
		roots = api.roots
	}
	ic := &Intercept{
		Hosts: map[string][]Replacement{"api.test": {
			{Placeholder: set.Secrets[0].Placeholder, Value: realValue},
			{Placeholder: set.Secrets[1].Placeholder, Value: otherReal},
		}},
		Certificate: iss.Certificate,
		RootCAs:     roots,
	}
	f := start(t, allow, func(c *Config) {
		c.Hosts["api.test"] = []netip.Addr{api.ap.Addr()}
		c.Hosts["other.test"] = []netip.Addr{other.ap.Addr()}
		c.Intercept = ic
	})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(set.CACert))
	return &interceptFixture{fixture: f, api: api, other: other, set: set, caPool: pool}
}

// guestClient is a keep-alive HTTPS client that trusts roots and sends
// every connection to H.
func (f *interceptFixture) guestClient(roots *x509.CertPool, conns *int) *http.Client {
	var mu sync.Mutex
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			mu.Lock()
			if conns != nil {
				*conns++
			}
			mu.Unlock()
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(f.h.String(), port))
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true, // offered; the proxy agrees to http/1.1 only
	}}
}

func do(t *testing.T, c *http.Client, url, auth, host string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestInterceptReplacesHeaders(t *testing.T) {
	f := startIntercept(t, true)
	ph, ph2 := f.set.Secrets[0].Placeholder, f.set.Secrets[1].Placeholder
	conns := 0
	c := f.guestClient(f.caPool, &conns)
	url := fmt.Sprintf("https://api.test:%d", f.api.ap.Port())

	// Two requests on one keep-alive connection: both rewritten, both
	// placeholders of the name, wherever they are in a header value.
	resp, body := do(t, c, url+"/one", "Bearer "+ph, "")
	if resp.StatusCode != 200 || body != "ok /one" || resp.Proto != "HTTP/1.1" || resp.TLS.NegotiatedProtocol != "http/1.1" {
		t.Fatalf("first: %d %q %s alpn %q", resp.StatusCode, body, resp.Proto, resp.TLS.NegotiatedProtocol)
	}
	if got := resp.TLS.PeerCertificates[0].Issuer.CommonName; got != "agentbox sandbox CA test" {
		t.Errorf("guest saw a certificate issued by %q, want the sandbox's CA", got)
	}
	// The real value echoed in a response header is turned back.
	if got := resp.Header.Get("X-Seen"); got != "Bearer "+ph {
		t.Errorf("X-Seen %q, want the placeholder", got)
	}
	resp, _ = do(t, c, url+"/two", "Basic "+ph+":"+ph2, "")
	if resp.StatusCode != 200 {
		t.Fatalf("second: %d", resp.StatusCode)
	}
	want := []string{
		fmt.Sprintf("api.test:%d Bearer %s", f.api.ap.Port(), realValue),
		fmt.Sprintf("api.test:%d Basic %s:%s", f.api.ap.Port(), realValue, otherReal),
	}
	if got := f.api.requests(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("upstream saw\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if conns != 1 {
		t.Errorf("guest opened %d connections, want 1 (keep-alive)", conns)
	}
	if d := f.decs.last(KindIntercept); !d.Allowed || d.Name != "api.test" || d.Reason != "intercepted" || d.Upstream != f.api.ap {
		t.Errorf("decision %+v", d)
	}

	// Another allowed name is not intercepted: the placeholder goes out
	// unchanged and the guest sees the upstream's own certificate.
	oc := f.guestClient(f.other.roots, nil)
	resp, _ = do(t, oc, fmt.Sprintf("https://other.test:%d/x", f.other.ap.Port()), "Bearer "+ph, "")
	if resp.StatusCode != 200 || resp.TLS.PeerCertificates[0].Issuer.CommonName != "agentbox sandbox CA upstream" {
		t.Errorf("other.test: %d, certificate by %q", resp.StatusCode, resp.TLS.PeerCertificates[0].Issuer.CommonName)
	}
	if got := f.other.requests(); len(got) != 1 || got[0] != fmt.Sprintf("other.test:%d Bearer %s", f.other.ap.Port(), ph) {
		t.Errorf("other.test saw %q, want the placeholder", got)
	}
	if _, err := f.guestClient(f.caPool, nil).Get(fmt.Sprintf("https://other.test:%d/x", f.other.ap.Port())); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("other.test verified against the sandbox's CA: %v, want a certificate error", err)
	}
}

func TestInterceptRefusesDomainFronting(t *testing.T) {
	f := startIntercept(t, true)
	ph := f.set.Secrets[0].Placeholder
	c := f.guestClient(f.caPool, nil)
	// TLS to api.test, Host other.test (also allowed, on the port where
	// api.test is allowed too): refused, nothing reaches a backend.
	resp, body := do(t, c, fmt.Sprintf("https://api.test:%d/", f.other.ap.Port()), "Bearer "+ph, "other.test")
	if resp.StatusCode != http.StatusMisdirectedRequest || !strings.Contains(body, "the Host must match the TLS server name") {
		t.Fatalf("fronting: %d %q", resp.StatusCode, body)
	}
	d := f.decs.last(KindIntercept)
	if d.Allowed || d.Name != "other.test" || d.Reason != `Host "other.test" does not match the TLS server name api.test (domain fronting)` {
		t.Errorf("decision %+v", d)
	}
	if a, o := f.api.requests(), f.other.requests(); len(a)+len(o) != 0 {
		t.Errorf("backends saw %q %q", a, o)
	}

	// Raw: a later keep-alive request with another Host is refused too.
	conn, err := tls.Dial("tcp", netip.AddrPortFrom(f.h, f.api.ap.Port()).String(), &tls.Config{ServerName: "api.test", RootCAs: f.caPool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /a HTTP/1.1\r\nHost: api.test\r\nAuthorization: %s\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.test\r\nAuthorization: %s\r\n\r\n", ph, ph)
	br := bufio.NewReader(conn)
	for i, want := range []int{200, 421} {
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, r.Body)
		if r.StatusCode != want {
			t.Errorf("response %d: %d, want %d", i, r.StatusCode, want)
		}
	}
	if got := f.api.requests(); len(got) != 1 || !strings.HasSuffix(got[0], " "+realValue) {
		t.Errorf("api.test saw %q", got)
	}
}

func TestInterceptUpstreamVerified(t *testing.T) {
	f := startIntercept(t, false) // the upstream's CA is not trusted
	resp, body := do(t, f.guestClient(f.caPool, nil), fmt.Sprintf("https://api.test:%d/", f.api.ap.Port()), "Bearer "+f.set.Secrets[0].Placeholder, "")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "certificate") {
		t.Errorf("untrusted upstream: %d %q, want 502 naming the certificate", resp.StatusCode, body)
	}
	if got := f.api.requests(); len(got) != 0 {
		t.Errorf("untrusted upstream got %q", got)
	}
	if d := f.decs.last(KindIntercept); !strings.HasPrefix(d.Reason, "upstream failed: TLS with ") {
		t.Errorf("decision %+v", d)
	}
}

// TestInterceptLargeBody: a response of 8 MiB streams through whole.
func TestInterceptLargeBody(t *testing.T) {
	f := startIntercept(t, true)
	resp, err := f.guestClient(f.caPool, nil).Get(fmt.Sprintf("https://api.test:%d/big", f.api.ap.Port()))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 8<<20 {
		t.Errorf("read %d bytes, %v; want %d", n, err, 8<<20)
	}
}

// BenchmarkInterceptDownload: HTTPS downloads of 8 MiB on loopback
// through the passthrough (spliced) proxy and through the intercepting
// one, each on a keep-alive connection.
func BenchmarkInterceptDownload(b *testing.B) {
	f := startIntercept(b, true)
	for _, bc := range []struct {
		name string
		c    *http.Client
		url  string
	}{
		{"passthrough", f.guestClient(f.other.roots, nil), fmt.Sprintf("https://other.test:%d/big", f.other.ap.Port())},
		{"intercepted", f.guestClient(f.caPool, nil), fmt.Sprintf("https://api.test:%d/big", f.api.ap.Port())},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(8 << 20)
			for b.Loop() {
				resp, err := bc.c.Get(bc.url)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != 8<<20 {
					b.Fatalf("read %d %v", n, err)
				}
			}
		})
	}
}

// TestInterceptMaxHeaderBytes: inside an intercepted connection a request
// whose headers pass MaxHeaderBytes (a 1 MiB Host, or any large header)
// gets 431 and reaches no backend; one under it goes through.
func TestInterceptMaxHeaderBytes(t *testing.T) {
	f := startIntercept(t, true)
	ph := f.set.Secrets[0].Placeholder
	send := func(host, extra string) (int, string) {
		t.Helper()
		conn, err := tls.Dial("tcp", netip.AddrPortFrom(f.h, f.api.ap.Port()).String(), &tls.Config{ServerName: "api.test", RootCAs: f.caPool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go fmt.Fprintf(conn, "GET /h HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nX-Big: %s\r\n\r\n", host, ph, extra)
		r, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%d-byte Host, %d-byte header: %v", len(host), len(extra), err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		return r.StatusCode, string(b)
	}
	if code, body := send("api.test", strings.Repeat("b", MaxHeaderBytes/2)); code != 200 || body != "ok /h" {
		t.Errorf("a 32 KiB header: %d %q, want 200", code, body)
	}
	for _, tc := range []struct{ host, extra string }{
		{"api.test", strings.Repeat("b", MaxHeaderBytes+8<<10)},
		{strings.Repeat("h", 1<<20), "x"},
	} {
		if code, body := send(tc.host, tc.extra); code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d-byte Host, %d-byte header: %d %.200q…, want 431", len(tc.host), len(tc.extra), code, body)
		}
	}
	if got := f.api.requests(); len(got) != 1 {
		t.Errorf("api.test saw %d requests, want only the small one", len(got))
	}
}
