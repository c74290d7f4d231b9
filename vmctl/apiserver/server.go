package apiserver

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Config configures a Server.
type Config struct {
	// Backend does the work (the daemon). Required.
	Backend backend.Backend
	// Logger receives request and error logs; nil discards them.
	Logger *slog.Logger
	// Metrics serves GET /metrics (the daemon's Prometheus handler); nil
	// answers that route 404 not_found.
	Metrics http.Handler
	// Registerer, if set, receives the server's own metrics:
	// agentbox_api_errors_total{code} and
	// agentbox_api_request_duration_seconds{route,method,status}.
	Registerer prometheus.Registerer
	// Token is the bearer token TCP clients must send ("Authorization:
	// Bearer TOKEN"); surrounding white space (a token file's newline) is
	// ignored; at least MinTokenBytes long. The unix socket needs none.
	Token string
	// TLS, if set, makes TCP listeners serve HTTPS with it. A client
	// certificate it verifies names the caller ("tls:CN").
	TLS *tls.Config
	// Tenants, if set, are the tenants whose bearer tokens TCP listeners
	// accept besides Token (serve --tenants): a request with a tenant's
	// token acts for that tenant (tenant.With; caller "tenant:NAME") and
	// sees only its own sandboxes. Token stays the admin's.
	Tenants *tenant.Registry
	// Keyring, if set, is what TCP requests' bearer tokens are checked
	// against (vmctl/auth), the one keyring of the daemon's fronts: it
	// holds Token as its admin's and Tenants as its tenants (NewServer
	// checks), and the cluster peers' token when Router is set. nil: the
	// keyring of Token and Tenants alone (auth.New).
	Keyring *auth.Keyring
	// IdleTimeout closes keep-alive connections idle this long; 0 means
	// 2 minutes.
	IdleTimeout time.Duration
	// Router, if set, sends the requests of sandboxes on other cluster
	// nodes there and merges their lists (serve --cluster; cluster.go);
	// it needs a Keyring with the cluster peers' token (auth.Config.Peer),
	// which a Keyring has only with a Router. nil: a single host,
	// everything is served here.
	Router Router
}

// MinTokenBytes is the shortest bearer token NewServer accepts.
const MinTokenBytes = 16

// ReadHeaderTimeout bounds how long a client may take to send a request's
// headers. Bodies and responses have no timeout: they are streams (exec
// output, uploads, events) that last as long as their work.
const ReadHeaderTimeout = 10 * time.Second

// MaxHeaderBytes bounds a request's line and headers (64 KiB, not Go's
// default 1 MiB): a larger request gets 431 Request Header Fields Too
// Large. Every HTTP front of the daemon (this API, serve --e2b-listen)
// uses it.
const MaxHeaderBytes = 64 << 10

// CheckTCP returns an error unless cfg may serve a TCP listener on addr:
// it needs a secret every request must carry (a Token, Tenants or a
// Keyring that requires a secret) or TLS that requires verified client
// certificates (tls.RequireAndVerifyClientCert, serve --tls-client-ca).
// Without either, anyone who reaches the port could run commands in the
// sandboxes: TLS with a server certificate alone only encrypts, so it is
// refused too. Serve runs the same check; the daemon calls it before
// binding to fail early.
func CheckTCP(cfg Config, addr string) error {
	if strings.TrimSpace(cfg.Token) != "" || cfg.Tenants != nil || cfg.Keyring.RequiresSecret() {
		return nil
	}
	if cfg.TLS == nil {
		return fmt.Errorf("refusing to listen on TCP %s without --token-file or --tls-cert/--tls-key: anyone who can reach the port could run commands in your sandboxes", addr)
	}
	if cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return fmt.Errorf("refusing to listen on TCP %s unauthenticated: --tls-cert needs --tls-client-ca (client certificates) or a token (--token-file or --tenants); TLS alone encrypts but lets anyone who can reach the port run commands in your sandboxes", addr)
	}
	return nil
}

// Server serves the REST API (see the package documentation) on any
// number of listeners. It is safe for concurrent use.
type Server struct {
	backend backend.Backend
	log     *slog.Logger
	metrics http.Handler
	m       *serverMetrics
	keys    *auth.Keyring
	tls     *tls.Config
	idle    time.Duration
	router  Router
	mux     *http.ServeMux
	handler http.Handler

	// drain ends when Shutdown starts: endless streams (events, followed
	// process output) end with it so they do not hold the shutdown up.
	drain     context.Context
	stopDrain context.CancelFunc

	mu      sync.Mutex
	servers []*http.Server
	closed  bool
	// upgraded counts the sessions on hijacked (WebSocket) connections,
	// which http.Server.Shutdown neither waits for nor closes; Shutdown
	// waits for upgradedIdle and, when its ctx ends, cancels them with
	// stopUpgraded.
	upgraded     int
	upgradedIdle chan struct{}
	upgradedCtx  context.Context
	stopUpgraded context.CancelFunc
}

// NewServer checks cfg and returns a Server. Errors: no Backend, a Token
// shorter than MinTokenBytes, a Keyring without Token or Tenants, a
// Router without the Keyring's peer token or the other way round, a TLS
// config without certificate, metrics that cannot be registered (e.g.
// registered twice).
func NewServer(cfg Config) (*Server, error) {
	if cfg.Backend == nil {
		return nil, errors.New("api: Config.Backend is nil")
	}
	token := strings.TrimSpace(cfg.Token)
	if token != "" && len(token) < MinTokenBytes {
		return nil, fmt.Errorf("the bearer token is %d bytes long: use at least %d random bytes, e.g. the output of `openssl rand -hex 32`", len(token), MinTokenBytes)
	}
	if strings.ContainsAny(token, " \t\r\n") {
		return nil, errors.New("the bearer token contains white space: use one word, e.g. the output of `openssl rand -hex 32`")
	}
	keys := cfg.Keyring
	if keys == nil {
		keys = auth.New(auth.Config{Admin: token, Tenants: cfg.Tenants})
	}
	if !keys.Holds(token, cfg.Tenants) {
		return nil, errors.New("api: Config.Keyring does not hold Config.Token and Config.Tenants: make it of them (auth.Config Admin and Tenants)")
	}
	if (cfg.Router != nil) != keys.HasPeer() {
		return nil, errors.New("api: a Config.Router needs the cluster peers' token in Config.Keyring (auth.Config.Peer), and that token a Router")
	}
	if cfg.TLS != nil && len(cfg.TLS.Certificates) == 0 && cfg.TLS.GetCertificate == nil && cfg.TLS.GetConfigForClient == nil {
		return nil, errors.New("the TLS config has no certificate: give --tls-cert and --tls-key")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	idle := cfg.IdleTimeout
	if idle == 0 {
		idle = 2 * time.Minute
	}
	s := &Server{
		backend: cfg.Backend,
		log:     log,
		metrics: cfg.Metrics,
		keys:    keys,
		idle:    idle,
		router:  cfg.Router,
		mux:     http.NewServeMux(),
	}
	if cfg.TLS != nil {
		s.tls = cfg.TLS.Clone()
	}
	if cfg.Registerer != nil {
		m, err := newServerMetrics(cfg.Registerer)
		if err != nil {
			return nil, err
		}
		s.m = m
	}
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	s.upgradedCtx, s.stopUpgraded = context.WithCancel(context.Background())
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, s.routeHandler(rt))
	}
	s.handler = http.HandlerFunc(s.serveHTTP)
	return s, nil
}

// Handler returns the API's handler as the unix socket serves it: no
// bearer token is checked and the Caller is whatever the request's context
// carries (WithCaller), else "unknown". Listeners should go through Serve,
// which adds peer credentials and, on TCP, authentication.
func (s *Server) Handler() http.Handler { return s.handler }

// Handle serves h for pattern (an http.ServeMux pattern outside /v1,
// e.g. "/mcp") on every listener, behind the same authentication as the
// API: the unix socket names the caller by uid, TCP needs the bearer
// token (or a verified client certificate); h finds the caller with
// api.CallerFrom. Call it before Serve.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// Serve accepts connections on l until Shutdown and returns nil after a
// Shutdown (also when called after it: then it closes l at once), else the
// accept error. A unix listener (l.Addr().Network() is
// "unix") serves without a token and names callers by their uid (peer
// credentials); any other listener is treated as TCP: it is refused
// (CheckTCP) without a Token, Tenants or TLS requiring client
// certificates, wrapped in TLS when Config.TLS is
// set, and every request must carry the Token when one is set. Serve may be
// called for several listeners at once; it closes l when it returns.
func (s *Server) Serve(l net.Listener) error {
	srv := &http.Server{
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       s.idle,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if l.Addr().Network() == "unix" {
		srv.Handler = s.handler
		srv.ConnContext = unixConnContext
	} else {
		if err := CheckTCP(Config{TLS: s.tls, Keyring: s.keys}, l.Addr().String()); err != nil {
			l.Close()
			return err
		}
		if s.tls != nil {
			l = tls.NewListener(l, s.tls)
		}
		srv.Handler = s.tcpAuth(s.handler)
	}
	srv.RegisterOnShutdown(s.stopDrain)
	s.mu.Lock()
	if s.closed {
		// Shutdown won the race with this Serve (e.g. started in a
		// goroutine): serve nothing, as if Shutdown had come later.
		s.mu.Unlock()
		l.Close()
		return nil
	}
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	s.log.Info("API listening", "network", l.Addr().Network(), "addr", l.Addr().String())
	err := srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the listeners, ends event streams and followed process
// output, and waits for the other requests in flight (execs, uploads) to
// finish until ctx ends; then it closes their connections (their backend
// contexts are cancelled) and returns ctx's error. Serve calls return nil.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	servers := s.servers
	s.mu.Unlock()
	defer s.stopDrain()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, srv := range servers {
		wg.Go(func() {
			if err := srv.Shutdown(ctx); err != nil {
				errs[i] = err
				srv.Close()
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	var idle chan struct{}
	if s.upgraded > 0 {
		idle = make(chan struct{})
		s.upgradedIdle = idle
	}
	s.mu.Unlock()
	if idle != nil {
		select {
		case <-idle:
		case <-ctx.Done():
			s.stopUpgraded()
			errs = append(errs, ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// hijacked registers a session on a connection taken over from the HTTP
// server (a WebSocket) for Shutdown, which waits for it like for any
// request and cancels the returned context when its own ctx ends. end
// unregisters it.
func (s *Server) hijacked(parent context.Context) (ctx context.Context, end func()) {
	s.mu.Lock()
	s.upgraded++
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(s.upgradedCtx, cancel)
	return ctx, func() {
		stop()
		cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.upgraded--
		if s.upgraded == 0 && s.upgradedIdle != nil {
			close(s.upgradedIdle)
			s.upgradedIdle = nil
		}
	}
}

// serveHTTP is the API's handler: it refuses unclean URL paths, answers
// unknown routes and methods with JSON errors, and routes the rest.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &respWriter{ResponseWriter: w}
	route := "unmatched"
	defer func() {
		d := time.Since(start)
		status := rw.status
		if !rw.wrote {
			status = http.StatusOK // what net/http sends for a handler that wrote nothing
		}
		s.observe(route, r.Method, status, d)
		s.log.Debug("API request", "method", r.Method, "route", route, "status", status,
			"duration_ms", d.Milliseconds(), "caller", api.CallerFrom(r.Context()).ID)
	}()
	if !cleanURLPath(r.URL.Path) {
		s.serveError(rw, r, route, api.Invalidf("URL path %s has an empty, \".\" or \"..\" element: sandbox references and paths in URLs must not contain them", api.QuoteShort(r.URL.Path)))
		return
	}
	if r.Method == http.MethodHead {
		// ServeMux lets HEAD into GET routes; streams make that pointless.
		if _, p := s.mux.Handler(withMethod(r, http.MethodGet)); p != "" {
			rw.Header().Set("Allow", "GET")
		}
		s.serveError(rw, r, route, api.Errorf(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "HEAD is not supported: use GET"))
		return
	}
	h, pattern := s.mux.Handler(r)
	if pattern == "" {
		// ServeMux's own 404 or 405 (with Allow): keep status and Allow,
		// answer in JSON.
		c := &captureWriter{h: make(http.Header)}
		h.ServeHTTP(c, r)
		if c.status == http.StatusMethodNotAllowed {
			allow := c.h.Get("Allow")
			rw.Header().Set("Allow", allow)
			s.serveError(rw, r, route, api.Errorf(http.StatusMethodNotAllowed, api.CodeMethodNotAllowed, "%s is not allowed on %s: use %s", r.Method, r.URL.Path, allow))
			return
		}
		s.serveError(rw, r, route, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no API route %s %s: see GET /v1/openapi.yaml for the routes", r.Method, api.QuoteShort(r.URL.Path)))
		return
	}
	if m, p, ok := strings.Cut(pattern, " "); ok {
		route = p
	} else {
		route = m // a Handle pattern without method
	}
	s.mux.ServeHTTP(rw, r)
}

// withMethod returns a shallow copy of r with another method.
func withMethod(r *http.Request, method string) *http.Request {
	r2 := *r
	r2.Method = method
	return &r2
}

// cleanURLPath reports whether p is absolute without "." or ".." elements
// or empty elements ("//"), a trailing "/" aside.
func cleanURLPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	els := strings.Split(p[1:], "/")
	for i, el := range els {
		if el == "." || el == ".." || (el == "" && i != len(els)-1) {
			return false
		}
	}
	return true
}

// routeHandler runs one route: query check, handler, error answer.
func (s *Server) routeHandler(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := checkQuery(r, rt.query)
		served := false
		if err == nil {
			served, err = s.route(w, r, rt.path) // another cluster node's sandbox (cluster.go)
		}
		if err == nil && !served {
			err = rt.handle(s, w, r, q)
		}
		if err == nil {
			return
		}
		if clientGone(r, err) {
			// The client went away (Ctrl-C on an exec): nobody reads an
			// answer, and it is not the server's failure.
			s.log.Debug("API request abandoned by the client", "route", rt.path, "method", r.Method, "caller", api.CallerFrom(r.Context()).ID)
			return
		}
		if rw, ok := w.(*respWriter); ok && rw.wrote {
			// The answer has begun: the error cannot become a status.
			s.streamFailed(r, rt.path, err)
			if r.Context().Err() == nil {
				// Break the connection so the client sees a cut stream, not
				// a clean end.
				panic(http.ErrAbortHandler)
			}
			return
		}
		s.serveError(w, r, rt.path, err)
	})
}

// clientGone reports whether err is the end of r's context: the client
// closed the connection (or cancelled the request), so err is no failure
// of the server's and is neither answered nor counted, only logged at
// Debug level by routeHandler.
func clientGone(r *http.Request, err error) bool {
	return r.Context().Err() != nil && errors.Is(err, r.Context().Err())
}

// serveError answers err as an ErrorResponse with its status, counts it and
// logs it (server errors at Error level).
func (s *Server) serveError(w http.ResponseWriter, r *http.Request, route string, err error) {
	e := s.apiError(r, route, err)
	body, _ := json.Marshal(api.ErrorResponse{Error: *e})
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeJSON)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Status)
	w.Write(append(body, '\n'))
}

// apiError normalises err to an *Error, counts it and logs it.
func (s *Server) apiError(r *http.Request, route string, err error) *api.Error {
	e := api.ErrorFrom(err)
	if e.Status < 400 || e.Status > 599 {
		e = &api.Error{Status: http.StatusInternalServerError, Code: e.Code, Message: e.Message, Details: e.Details}
	}
	if e.Code == "" {
		e.Code = api.CodeOf(e.Status)
	}
	s.countError(e.Code)
	attrs := []any{"route", route, "method", r.Method, "caller", api.CallerFrom(r.Context()).ID, "status", e.Status, "code", e.Code, "err", err}
	if e.Status >= 500 {
		s.log.Error("API request failed", attrs...)
	} else {
		s.log.Debug("API request refused", attrs...)
	}
	return e
}

// streamFailed logs and counts an error after the answer began.
func (s *Server) streamFailed(r *http.Request, route string, err error) {
	if r.Context().Err() != nil {
		s.log.Debug("API stream ended: the client went away", "route", route, "caller", api.CallerFrom(r.Context()).ID, "err", err)
		return
	}
	e := api.ErrorFrom(err)
	s.countError(e.Code)
	s.log.Error("API stream failed after its answer began", "route", route, "method", r.Method, "caller", api.CallerFrom(r.Context()).ID, "code", e.Code, "err", err)
}

// respWriter records whether and with what status the answer began.
type respWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *respWriter) WriteHeader(code int) {
	if !w.wrote && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *respWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// FlushError flushes buffered output to the client (http.ResponseController).
func (w *respWriter) FlushError() error {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher.
func (w *respWriter) Flush() { w.FlushError() }

// Unwrap gives http.ResponseController the underlying writer.
func (w *respWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// captureWriter records a handler's status and headers, dropping its body.
type captureWriter struct {
	h      http.Header
	status int
}

func (c *captureWriter) Header() http.Header         { return c.h }
func (c *captureWriter) Write(p []byte) (int, error) { return len(p), nil }
func (c *captureWriter) WriteHeader(code int)        { c.status = code }
