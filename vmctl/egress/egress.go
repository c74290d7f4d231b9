// Package egress is the host side of a sandbox's name-based network policy: a
// DNS resolver and a TCP proxy bound to the host end H of the sandbox's tap
// (vmctl/network gives each sandbox a /30: H on the host, G in the guest; the
// guest's resolv.conf points at H and its firewall lets the guest reach only
// H's egress ports and the policy's CIDR rules).
//
// DNS (H:53, UDP and TCP). An allowed name (netpolicy.Policy.AllowsName) and
// netpolicy.HostAlias (when the policy has host:PORT rules) are answered with
// H itself: all name-based traffic goes through the proxy at H, so the guest
// never learns or reaches a real address. AAAA (A when H is IPv6) and other
// types of an allowed name get an empty NOERROR; every other name gets
// NXDOMAIN, whatever its type; ANY, non-IN classes and non-query opcodes get
// REFUSED. Unknown names are never forwarded upstream, so the resolver's
// questions cannot carry data out; but the proxy resolves the name a guest
// sends when a rule covers it, so with a wildcard rule (*.example.com) the
// guest chooses names the host resolves (data out through DNS). Under
// netpolicy.DNSStrict the policy has no wildcard rules, and an allowed name
// is answered only after it resolved on the host to an address the proxy
// would use (strict.go). With Config.ForwardAll (open mode only) A/AAAA of
// any name are resolved upstream and answered with the real addresses, minus
// what open mode does not reach (netpolicy.Policy.OpenReaches: loopback,
// link-local, multicast, unspecified, reserved, carrier-grade NAT
// 100.64.0.0/10 with the metadata address 100.100.100.200; private and ULA
// too with BlockPrivate, as the tap drops them) and the host's own addresses.
// Every check judges an IPv6 address that carries an IPv4 address (NAT64
// 64:ff9b::/96, 6to4 2002::/16, IPv4-mapped, ...) as that IPv4 address
// (netpolicy.Classify).
//
// Proxy (H:PORT for each netpolicy.Policy.NamePorts port). The proxy peeks at
// the first bytes, up to 64 KiB within Config.PeekTimeout: a TLS ClientHello
// gives the SNI name (crypto/tls parses it; TLS is not terminated), anything
// else must be an HTTP/1.x request whose Host (port stripped) is the name. The
// name must match a rule for that port (AllowsNamePort); otherwise the
// connection is closed, after a 403 for HTTP. An allowed name is resolved on
// the host (Config.Hosts first, then Config.Resolver); addresses from the
// resolver that are not public (netpolicy.Classify: loopback, link-local,
// multicast, unspecified, private RFC 1918, fc00::/7, 0.0.0.0/8,
// 100.64.0.0/10, ...) or are the host's own are refused
// (DNS-rebinding protection: an allowed name cannot be pointed at the host or
// its network); Config.Hosts entries are trusted as configured. The proxy dials
// the first usable address at the same port, replays the peeked bytes and
// splices both ways (splice(2) on Linux, half-close aware).
//
// What name checking cannot stop: a client may send a different Host inside a
// TLS session or in a later keep-alive request (domain fronting) and ECH hides
// the inner SNI; the bytes still go only to an address of the allowed name.
// Names in Config.Intercept (the hosts a secret is bound to) are the
// exception: there the proxy terminates TLS, checks every request's Host
// against the SNI and puts the secrets into the headers (intercept.go).
//
// Host forwarder (H:PORT for each host:PORT rule): accepted connections are
// spliced to 127.0.0.1:PORT, with no inspection.
//
// Every accepted TCP connection (proxy, forwarder, DNS over TCP) counts
// against Config.MaxConns; past it new connections are closed at once.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/miekg/dns"
)

// Resolver looks up a host name's addresses; *net.Resolver (net.DefaultResolver)
// implements it. network is "ip", "ip4" or "ip6". A name that does not exist
// should yield a *net.DNSError with IsNotFound set.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults of Config's zero fields.
const (
	DefaultMaxConns      = 256
	DefaultPeekTimeout   = 10 * time.Second
	DefaultDialTimeout   = 10 * time.Second
	DefaultLookupTimeout = 5 * time.Second
	// PeekLimit is the most bytes read from a guest connection before its
	// SNI or Host is known (bytes).
	PeekLimit = 64 << 10
)

// Config configures a Service.
type Config struct {
	// Addr is H, the host side of the sandbox's tap. The service binds only
	// there (never a wildcard address); the address must already be configured.
	Addr netip.Addr
	// Policy must be allowlist or open (mode none has no network to serve).
	Policy netpolicy.Policy
	// Resolver resolves allowed names on the host; nil means net.DefaultResolver.
	Resolver Resolver
	// Hosts maps lowercase names (no trailing dot) to addresses, consulted
	// before Resolver and trusted: its addresses may be private or loopback
	// (daemon config, tests), except for a policy with BlockPrivate, whose
	// answers from Hosts are checked as the Resolver's. It never makes a
	// name allowed.
	Hosts map[string][]netip.Addr
	// ForwardAll (open mode only): the resolver answers A/AAAA for any name
	// with its real addresses (filtered, see the package doc).
	ForwardAll bool
	// Logger receives debug logs per decision and warnings; nil discards.
	Logger *slog.Logger
	// OnDecision, if set, is called once per DNS question and per proxied or
	// forwarded connection, from the serving goroutine: keep it fast; it must
	// be safe for concurrent use.
	OnDecision func(Decision)
	// MaxConns caps concurrent TCP connections (default DefaultMaxConns).
	MaxConns int
	// PeekTimeout bounds the wait for the SNI/Host bytes (default DefaultPeekTimeout).
	PeekTimeout time.Duration
	// DialTimeout bounds each upstream dial (default DefaultDialTimeout).
	DialTimeout time.Duration
	// LookupTimeout bounds each upstream name lookup (default DefaultLookupTimeout).
	LookupTimeout time.Duration
	// Intercept, if set, makes the proxy terminate TLS to its names and
	// put secrets into request headers (intercept.go); nil intercepts
	// nothing.
	Intercept *Intercept
}

// Decision kinds.
const (
	KindDNS   = "dns"   // a DNS question
	KindProxy = "proxy" // a connection to a name through the proxy
	KindHost  = "host"  // a connection to a host:PORT forwarder
)

// Decision is one allow/deny outcome, for the daemon's audit trail.
type Decision struct {
	Kind    string         // KindDNS, KindProxy or KindHost
	Allowed bool           // the policy let it through
	Name    string         // the queried name, SNI or Host (lowercase, no trailing dot); HostAlias for KindHost
	Port    uint16         // 53 for DNS, the listener's port otherwise
	Guest   netip.AddrPort // the guest's end of the connection or query
	// Upstream is the address dialed (proxy and forwarder; invalid if none).
	Upstream netip.AddrPort
	// Reason says why: "allowed", "not in allowlist", "no SNI or Host",
	// "resolves only to loopback/private addresses", "dial failed: ...",
	// "connection limit", "query type ANY refused", ...
	Reason string
}

// Service is a running egress service; Close stops it.
type Service struct {
	cfg     Config
	log     *slog.Logger
	ctx     context.Context // canceled by Close
	cancel  context.CancelFunc
	sem     chan struct{} // connection slots
	lookups chan struct{} // upstream lookup slots (ForwardAll)

	dnsSrv    []*dns.Server
	listeners []net.Listener
	wg        sync.WaitGroup

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}

	closeOnce sync.Once
	closeErr  error
}

// Start binds DNS on Addr:53 (UDP and TCP) and TCP listeners on Addr:PORT for
// each of Policy.TCPPorts(), then serves until Close. ctx bounds only the
// start; the service outlives it. Errors: an invalid Config (the message says
// what to fix) or a failed bind (address not configured, port in use, or no
// permission for ports below 1024: run as root or with CAP_NET_BIND_SERVICE);
// nothing stays bound after an error.
func Start(ctx context.Context, cfg Config) (*Service, error) {
	if !cfg.Addr.IsValid() || cfg.Addr.IsUnspecified() || cfg.Addr.Zone() != "" {
		return nil, fmt.Errorf("egress: Addr %v: want the host side of the sandbox's tap (a specific address, no zone)", cfg.Addr)
	}
	cfg.Addr = cfg.Addr.Unmap()
	if err := cfg.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	if !cfg.Policy.HasNIC() {
		return nil, fmt.Errorf("egress: network mode %q has no network: start the service only for allowlist or open", cfg.Policy.Mode)
	}
	if err := cfg.Intercept.validate(); err != nil {
		return nil, err
	}
	if cfg.ForwardAll && cfg.Policy.Mode != netpolicy.ModeOpen {
		return nil, fmt.Errorf("egress: ForwardAll resolves every name and is for mode open only, not %q", cfg.Policy.Mode)
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.PeekTimeout <= 0 {
		cfg.PeekTimeout = DefaultPeekTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.LookupTimeout <= 0 {
		cfg.LookupTimeout = DefaultLookupTimeout
	}
	hosts := make(map[string][]netip.Addr, len(cfg.Hosts))
	for name, addrs := range cfg.Hosts {
		hosts[canonicalName(name)] = addrs
	}
	cfg.Hosts = hosts

	s := &Service{
		cfg:     cfg,
		log:     cfg.Logger.With("egress", cfg.Addr.String()),
		sem:     make(chan struct{}, cfg.MaxConns),
		lookups: make(chan struct{}, maxLookups),
		conns:   map[net.Conn]struct{}{},
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := s.start(ctx); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

func (s *Service) start(ctx context.Context) error {
	var lc net.ListenConfig
	at := func(port uint16) string { return netip.AddrPortFrom(s.cfg.Addr, port).String() }

	pc, err := lc.ListenPacket(ctx, "udp", at(53))
	if err != nil {
		return fmt.Errorf("egress: DNS: %w", err)
	}
	dl, err := lc.Listen(ctx, "tcp", at(53))
	if err != nil {
		pc.Close()
		return fmt.Errorf("egress: DNS: %w", err)
	}
	handler := dns.HandlerFunc(s.serveDNS)
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: handler, UDPSize: dns.DefaultMsgSize},
		{Listener: &limitListener{Listener: dl, s: s}, Handler: handler, MaxTCPQueries: 128},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		errc := make(chan error, 1)
		s.wg.Go(func() { errc <- srv.ActivateAndServe() })
		select {
		case <-started:
			s.dnsSrv = append(s.dnsSrv, srv)
		case err := <-errc:
			return fmt.Errorf("egress: DNS: %w", err)
		}
	}

	hostPorts := s.cfg.Policy.HostPorts()
	for _, port := range s.cfg.Policy.TCPPorts() {
		ln, err := lc.Listen(ctx, "tcp", at(port))
		if err != nil {
			return fmt.Errorf("egress: port %d: %w", port, err)
		}
		s.listeners = append(s.listeners, ln)
		isHost := false
		for _, hp := range hostPorts {
			isHost = isHost || hp == port
		}
		s.wg.Go(func() { s.acceptLoop(ln.(*net.TCPListener), port, isHost) })
	}
	s.log.Debug("egress started", "policy", s.cfg.Policy.String(), "ports", s.cfg.Policy.TCPPorts())
	return nil
}

// Addr returns the address the service is bound to (Config.Addr).
func (s *Service) Addr() netip.Addr { return s.cfg.Addr }

// Ports returns the TCP ports listened on besides 53 (Policy.TCPPorts()).
func (s *Service) Ports() []uint16 { return s.cfg.Policy.TCPPorts() }

// Close stops the DNS server and the listeners, closes every open connection
// (guest and upstream sides) and waits for all goroutines to end. The ports
// are free when it returns. It is safe to call more than once.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.cancel()
		s.mu.Lock()
		s.closed = true
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		var errs []error
		for _, ln := range s.listeners {
			if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		for _, srv := range s.dnsSrv {
			if err := srv.Shutdown(); err != nil {
				errs = append(errs, fmt.Errorf("egress: DNS shutdown: %w", err))
			}
		}
		s.wg.Wait()
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// track registers c so Close can close it; false if the service is closing
// (c is then closed).
func (s *Service) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Service) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	c.Close()
}

// acquire takes a connection slot without waiting.
func (s *Service) acquire() bool {
	select {
	case s.sem <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s *Service) release() { <-s.sem }

func (s *Service) decide(d Decision) {
	lvl := slog.LevelDebug
	s.log.Log(s.ctx, lvl, "egress decision", "kind", d.Kind, "allowed", d.Allowed, "name", d.Name, "port", d.Port,
		"guest", d.Guest.String(), "upstream", d.Upstream.String(), "reason", d.Reason)
	if s.cfg.OnDecision != nil {
		s.cfg.OnDecision(d)
	}
}

// limitListener closes connections past the service's MaxConns and tracks
// the rest for Close (DNS over TCP).
type limitListener struct {
	net.Listener
	s *Service
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.s.acquire() {
			l.s.decide(Decision{Kind: KindDNS, Name: "", Port: 53, Guest: addrPort(c.RemoteAddr()), Reason: "connection limit"})
			c.Close()
			continue
		}
		if !l.s.track(c) {
			l.s.release()
			continue
		}
		return &limitConn{Conn: c, s: l.s}, nil
	}
}

type limitConn struct {
	net.Conn
	s    *Service
	once sync.Once
}

func (c *limitConn) Close() error {
	c.once.Do(func() {
		c.s.untrack(c.Conn)
		c.s.release()
	})
	return nil
}

// canonicalName lowercases a name and drops one trailing dot.
func canonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.AddrPort()
	case *net.UDPAddr:
		return a.AddrPort()
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }
