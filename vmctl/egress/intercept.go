package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// KindIntercept is the Decision kind of an intercepted connection (one
// per connection once both TLS handshakes are done, or when one fails)
// and of a request refused inside one (its Host is not the SNI name).
const KindIntercept = "intercept"

// MaxHeaderBytes bounds a request's line and headers inside an
// intercepted connection: 64 KiB, as the daemon's API
// (apiserver.MaxHeaderBytes), not net/http's default 1 MiB; net/http
// reads up to 4 KiB more before it refuses. A larger request gets 431
// Request Header Fields Too Large and the connection closes; nothing goes
// upstream. It also bounds what a guest's headers can put into a
// Decision (the Host of a refused request), which the audit log cuts
// further (audit.MaxFieldBytes).
const MaxHeaderBytes = 64 << 10

// Intercept makes the proxy terminate the guest's TLS to some allowed
// names (vmctl/secrets binds secrets to them) and rewrite the headers of
// the requests it forwards there:
//
//   - the guest's ClientHello must name one of Hosts (SNI); the proxy
//     answers with Certificate(name), offering only ALPN http/1.1;
//   - the proxy connects to the name's address (as for any allowed name)
//     with real TLS: ServerName the name, verified against RootCAs;
//   - every HTTP/1.1 request on the connection (keep-alive included) must
//     carry a Host (port aside) equal to the SNI name, else it is refused
//     with 421 Misdirected Request and a Decision (Allowed false): no
//     domain fronting to another name through an intercepted connection;
//   - a request's line and headers hold at most MaxHeaderBytes (431
//     past it);
//   - in each request's headers every Replacement.Placeholder of the name
//     is replaced by its Value; the URL, body and trailers are left alone;
//   - in each response's headers every Value is replaced by its
//     Placeholder again (the body is not inspected: a server that echoes
//     its request body or headers in a body shows the value to the guest).
//
// Upgrades (WebSocket) are passed through after the 101. A connection to
// a name not in Hosts, and plain HTTP to any name, is proxied as before,
// unchanged: a placeholder sent there is useless.
type Intercept struct {
	// Hosts maps each intercepted name (lowercase, no trailing dot) to the
	// replacements made in the headers of the requests sent to it.
	Hosts map[string][]Replacement
	// Certificate returns the certificate chain shown to the guest for an
	// intercepted name (signed by a CA the guest trusts). Required.
	Certificate func(name string) (*tls.Certificate, error)
	// RootCAs verify the upstream servers; nil means the host's roots.
	RootCAs *x509.CertPool
}

// Replacement is one placeholder and the value it stands for.
type Replacement struct {
	// Placeholder is what the guest sends; Value what the upstream gets.
	Placeholder, Value string
}

// intercepts reports whether name's TLS connections are intercepted.
func (ic *Intercept) intercepts(name string) bool {
	if ic == nil {
		return false
	}
	_, ok := ic.Hosts[name]
	return ok
}

// validate checks the configuration Start is given.
func (ic *Intercept) validate() error {
	if ic == nil {
		return nil
	}
	if ic.Certificate == nil {
		return errors.New("egress: Intercept.Certificate is required")
	}
	for name, rs := range ic.Hosts {
		if name != canonicalName(name) || name == "" {
			return fmt.Errorf("egress: Intercept.Hosts: %q: want a lowercase name without a trailing dot", name)
		}
		for _, r := range rs {
			if r.Placeholder == "" || r.Value == "" {
				return fmt.Errorf("egress: Intercept.Hosts[%s]: empty placeholder or value", name)
			}
		}
	}
	return nil
}

// intercept serves an intercepted connection c, whose first bytes
// (peeked, the ClientHello) were already read, to name at port, reached
// at one of addrs. d is the connection's decision so far.
func (s *Service) intercept(c *net.TCPConn, peeked []byte, d Decision, addrs []netip.Addr) {
	ic, name, port := s.cfg.Intercept, d.Name, d.Port
	d.Kind = KindIntercept
	guest := tls.Server(&replayConn{TCPConn: c, r: io.MultiReader(bytes.NewReader(peeked), c)}, &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return ic.Certificate(name) },
		NextProtos:     []string{"http/1.1"},
		MinVersion:     tls.VersionTLS12,
	})
	guest.SetDeadline(time.Now().Add(s.cfg.PeekTimeout))
	if err := guest.HandshakeContext(s.ctx); err != nil {
		d.Allowed, d.Reason = false, "guest TLS handshake failed: "+err.Error()
		s.decide(d)
		return
	}
	guest.SetDeadline(time.Time{})

	// One upstream connection at a time (the guest's requests on this
	// connection come one after the other), made again when the server
	// closes it. The first is made now, so the decision names it.
	var upMu sync.Mutex
	dialUp := func(ctx context.Context) (net.Conn, error) {
		var errs []error
		for _, a := range addrs {
			ap := netip.AddrPortFrom(a, port)
			tc, err := s.dial(ap)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			up := tls.Client(tc, &tls.Config{ServerName: name, RootCAs: ic.RootCAs, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
			hctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
			err = up.HandshakeContext(hctx)
			cancel()
			if err != nil {
				s.untrack(tc)
				errs = append(errs, fmt.Errorf("TLS with %s: %w", ap, err))
				continue
			}
			upMu.Lock()
			d.Upstream = ap
			upMu.Unlock()
			return &trackedConn{Conn: up, s: s, raw: tc}, nil
		}
		return nil, errors.Join(errs...)
	}
	first, firstErr := dialUp(s.ctx)
	if firstErr != nil {
		d.Allowed, d.Reason = true, "upstream failed: "+firstErr.Error()
	} else {
		d.Allowed, d.Reason = true, "intercepted"
	}
	s.decide(d)

	tr := &http.Transport{
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			upMu.Lock()
			c, err := first, firstErr
			first, firstErr = nil, nil
			upMu.Unlock()
			if c != nil || err != nil {
				return c, err
			}
			return dialUp(ctx)
		},
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true, // the guest's Accept-Encoding goes as it is
	}
	defer func() {
		tr.CloseIdleConnections()
		upMu.Lock()
		if first != nil {
			first.Close()
		}
		upMu.Unlock()
	}()
	reps := ic.Hosts[name]
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	upstreamHost := name
	if port != 443 {
		upstreamHost = net.JoinHostPort(name, strconv.Itoa(int(port)))
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", upstreamHost
			pr.Out.Host = pr.In.Host
			if n := replaceHeaders(pr.Out.Header, reps, false); n > 0 {
				s.log.Debug("egress placeholders replaced", "name", name, "headers", n)
			}
		},
		Transport: tr,
		ModifyResponse: func(r *http.Response) error {
			replaceHeaders(r.Header, reps, true)
			return nil
		},
		ErrorLog: errLog,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.log.Debug("egress intercepted request failed", "name", name, "err", err)
			http.Error(w, fmt.Sprintf("agentbox: %s: %v", name, err), http.StatusBadGateway)
		},
	}
	var handlers sync.WaitGroup
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handlers.Add(1)
		defer handlers.Done()
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host = canonicalName(host); host != name {
			upMu.Lock()
			rd := d
			upMu.Unlock()
			rd.Allowed, rd.Name = false, host
			rd.Reason = fmt.Sprintf("Host %q does not match the TLS server name %s (domain fronting)", host, name)
			s.decide(rd)
			w.Header().Set("Connection", "close")
			http.Error(w, fmt.Sprintf("agentbox: this connection was opened to %s; a request for %q must open its own (the Host must match the TLS server name)", name, host), http.StatusMisdirectedRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})
	ln := &oneConnListener{c: guest, closed: make(chan struct{})}
	srv := &http.Server{
		Handler:           handler,
		ErrorLog:          errLog,
		ReadHeaderTimeout: s.cfg.PeekTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				ln.Close()
			}
		},
	}
	srv.Serve(ln)
	handlers.Wait() // a hijacked (upgraded) connection is still being copied
}

// replaceHeaders replaces, in every value of h, each placeholder by its
// value (or each value by its placeholder when reverse) and returns how
// many header values changed.
func replaceHeaders(h http.Header, reps []Replacement, reverse bool) int {
	n := 0
	for _, vs := range h {
		for i, v := range vs {
			nv := v
			for _, r := range reps {
				from, to := r.Placeholder, r.Value
				if reverse {
					from, to = to, from
				}
				nv = strings.ReplaceAll(nv, from, to)
			}
			if nv != v {
				n++
				vs[i] = nv
			}
		}
	}
	return n
}

// replayConn is a TCP connection whose first reads replay what the proxy
// peeked at.
type replayConn struct {
	*net.TCPConn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// trackedConn is an upstream TLS connection whose Close also forgets its
// TCP connection in the service.
type trackedConn struct {
	net.Conn
	s    *Service
	raw  *net.TCPConn
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.s.untrack(c.raw) })
	return err
}

// oneConnListener hands http.Server one connection, then blocks until
// closed.
type oneConnListener struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }
