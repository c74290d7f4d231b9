package egress

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// acceptLoop serves one TCP listener until it is closed.
func (s *Service) acceptLoop(ln *net.TCPListener, port uint16, isHost bool) {
	kind := KindProxy
	if isHost {
		kind = KindHost
	}
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Warn("egress accept", "port", port, "err", err)
			// EMFILE and friends: back off a little instead of spinning.
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !s.acquire() {
			s.decide(Decision{Kind: kind, Port: port, Guest: c.RemoteAddr().(*net.TCPAddr).AddrPort(), Reason: "connection limit"})
			c.Close()
			continue
		}
		if !s.track(c) {
			s.release()
			continue
		}
		s.wg.Go(func() {
			defer s.release()
			defer s.untrack(c)
			if isHost {
				s.forwardHost(c, port)
			} else {
				s.proxyName(c, port)
			}
		})
	}
}

// forwardHost splices c to 127.0.0.1:port.
func (s *Service) forwardHost(c *net.TCPConn, port uint16) {
	d := Decision{Kind: KindHost, Name: "host.agentbox.internal", Port: port, Guest: c.RemoteAddr().(*net.TCPAddr).AddrPort(),
		Upstream: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), port)}
	up, err := s.dial(d.Upstream)
	if err != nil {
		d.Allowed, d.Reason = true, "dial failed: "+err.Error()
		s.decide(d)
		return
	}
	defer s.untrack(up)
	d.Allowed, d.Reason = true, "allowed"
	s.decide(d)
	splice(c, up)
}

// proxyName peeks at the SNI or Host, checks it against the policy for port,
// and splices c to the name's address at port.
func (s *Service) proxyName(c *net.TCPConn, port uint16) {
	d := Decision{Kind: KindProxy, Port: port, Guest: c.RemoteAddr().(*net.TCPAddr).AddrPort()}
	c.SetReadDeadline(time.Now().Add(s.cfg.PeekTimeout))
	rec := &recorder{c: c, max: PeekLimit}
	name, isHTTP, err := sniff(rec)
	c.SetReadDeadline(time.Time{})
	if err != nil || name == "" {
		d.Reason = "no SNI or Host"
		if err != nil {
			d.Reason += ": " + err.Error()
		}
		s.decide(d)
		if isHTTP && err != nil {
			deny(c, "agentbox: "+err.Error())
		} else if isHTTP {
			deny(c, "agentbox: the request has no Host header; this sandbox reaches only allowlisted names")
		}
		return
	}
	d.Name = canonicalName(name)
	if !s.cfg.Policy.AllowsNamePort(d.Name, port) {
		d.Reason = "not in allowlist"
		s.decide(d)
		if isHTTP {
			deny(c, fmt.Sprintf("agentbox: %s port %d is not in this sandbox's network allowlist", d.Name, port))
		}
		return
	}
	addrs, trusted, err := s.lookup(d.Name, "ip")
	if err != nil {
		d.Allowed, d.Reason = true, "lookup failed: "+err.Error()
		s.decide(d)
		if isHTTP {
			writeStatus(c, "502 Bad Gateway", fmt.Sprintf("agentbox: %s could not be resolved on the host", d.Name))
		}
		return
	}
	var usable []netip.Addr
	for _, a := range addrs {
		if trusted || !forbiddenForProxy(a) {
			usable = append(usable, a)
		}
	}
	if len(usable) == 0 {
		d.Reason = "resolves only to loopback, link-local, private, metadata or host addresses"
		s.decide(d)
		if isHTTP {
			deny(c, fmt.Sprintf("agentbox: %s resolves only to addresses a sandbox may not reach", d.Name))
		}
		return
	}
	if !isHTTP && s.cfg.Intercept.intercepts(d.Name) {
		s.intercept(c, rec.buf, d, usable) // intercept.go
		return
	}
	var up *net.TCPConn
	for _, a := range usable {
		d.Upstream = netip.AddrPortFrom(a, port)
		if up, err = s.dial(d.Upstream); err == nil {
			break
		}
	}
	if err != nil {
		d.Allowed, d.Reason = true, "dial failed: "+err.Error()
		s.decide(d)
		if isHTTP {
			writeStatus(c, "502 Bad Gateway", fmt.Sprintf("agentbox: %s port %d did not accept the connection", d.Name, port))
		}
		return
	}
	defer s.untrack(up)
	d.Allowed, d.Reason = true, "allowed"
	s.decide(d)
	if _, err := up.Write(rec.buf); err != nil {
		return
	}
	rec.buf = nil
	splice(c, up)
}

// dial connects to ap within DialTimeout and tracks the connection.
func (s *Service) dial(ap netip.AddrPort) (*net.TCPConn, error) {
	dl := net.Dialer{Timeout: s.cfg.DialTimeout}
	c, err := dl.DialContext(s.ctx, "tcp", ap.String())
	if err != nil {
		return nil, err
	}
	tc := c.(*net.TCPConn)
	if !s.track(tc) {
		return nil, net.ErrClosed
	}
	return tc, nil
}

// splice copies both ways until both directions end. EOF on one side
// half-closes the other; an error closes both.
func splice(a, b *net.TCPConn) {
	done := make(chan struct{})
	one := func(dst, src *net.TCPConn) {
		_, err := io.Copy(dst, src) // splice(2) between TCP sockets on Linux
		if err != nil {
			a.Close()
			b.Close()
			return
		}
		dst.CloseWrite()
	}
	go func() {
		one(b, a)
		close(done)
	}()
	one(a, b)
	<-done
}

// errSniffed stops crypto/tls after it has parsed the ClientHello.
var errSniffed = errors.New("client hello read")

var errPeekLimit = fmt.Errorf("more than %d bytes before the SNI or Host", PeekLimit)

// sniff reads from rec until it knows the TLS SNI or the HTTP Host of the
// connection. isHTTP is true when the bytes were not TLS (a 403 can then be
// written) and parsed as an HTTP request. The bytes read stay in rec.buf.
func sniff(rec *recorder) (name string, isHTTP bool, err error) {
	br := bufio.NewReaderSize(rec, 4096)
	first, err := br.Peek(1)
	if err != nil {
		return "", false, err
	}
	if first[0] == 0x16 { // TLS handshake record
		// Replay what bufio already read, then go on reading through rec.
		sc := &sniffConn{r: io.MultiReader(bytesReader(rec.buf), rec)}
		var sni string
		srv := tls.Server(sc, &tls.Config{
			GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
				sni = h.ServerName
				return nil, errSniffed
			},
		})
		err := srv.Handshake()
		if sni == "" {
			if errors.Is(err, errSniffed) {
				err = errors.New("TLS ClientHello without SNI")
			}
			return "", false, err
		}
		return sni, false, nil
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return "", false, fmt.Errorf("not TLS and not an HTTP/1.x request: %w", err)
	}
	if req.Method == http.MethodConnect {
		return "", true, errors.New("CONNECT is not supported: connect to the name directly")
	}
	host := req.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return host, true, nil
}

func bytesReader(b []byte) io.Reader {
	c := make([]byte, len(b))
	copy(c, b)
	return &sliceReader{b: c}
}

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// recorder reads from c and keeps every byte read, up to max.
type recorder struct {
	c   io.Reader
	buf []byte
	max int
}

func (r *recorder) Read(p []byte) (int, error) {
	room := r.max - len(r.buf)
	if room <= 0 {
		return 0, errPeekLimit
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := r.c.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// sniffConn is the net.Conn crypto/tls parses the ClientHello from; writes
// fail, so nothing (no alert) goes back to the guest.
type sniffConn struct {
	r io.Reader
}

func (c *sniffConn) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *sniffConn) Write(p []byte) (int, error)        { return 0, errSniffed }
func (c *sniffConn) Close() error                       { return nil }
func (c *sniffConn) LocalAddr() net.Addr                { return &net.TCPAddr{} }
func (c *sniffConn) RemoteAddr() net.Addr               { return &net.TCPAddr{} }
func (c *sniffConn) SetDeadline(t time.Time) error      { return nil }
func (c *sniffConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *sniffConn) SetWriteDeadline(t time.Time) error { return nil }

// deny writes a 403 with a one-line body.
func deny(c net.Conn, msg string) { writeStatus(c, "403 Forbidden", msg) }

func writeStatus(c net.Conn, status, msg string) {
	body := msg + "\n"
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", status, len(body), body)
	// Read (and drop) what the client still sends for a moment, so closing
	// does not reset the connection before the client has read the answer.
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
		tc.SetReadDeadline(time.Now().Add(time.Second))
		io.Copy(io.Discard, io.LimitReader(tc, PeekLimit))
	}
}
