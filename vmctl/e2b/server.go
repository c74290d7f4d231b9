package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Caller is the caller ID every request of this front carries to the
// sandbox service (api.WithCaller): what the audit log shows.
const Caller = "e2b"

// ClientID is the clientID every sandbox answer carries (deprecated in
// E2B's API, still required by its schema).
const ClientID = "agentbox"

// DefaultTimeout is the timeout of a create or connect that names none,
// E2B's default: 300 seconds.
const DefaultTimeout = 300 * time.Second

// Config configures the front.
type Config struct {
	// Client reaches the sandbox service (in the daemon:
	// client.NewHandler over the API's handler). Required.
	Client *client.Client
	// Data serves data-plane requests (envd.NewHandler over the same
	// client); they reach it with the sandbox's ID in their context
	// (envd.WithSandbox). Nil answers them 501.
	Data http.Handler
	// Keyring holds the API keys (vmctl/auth, the daemon's one keyring):
	// every control-plane request must carry one as X-API-KEY
	// (auth.APIKey). The daemon's token is the admin's, who sees every
	// sandbox; with tenants (serve --tenants) a tenant's token is an API
	// key too, and a request with one acts for its tenant (tenant.With),
	// which sees, connects to and kills only its own sandboxes, as on the
	// REST API. The cluster peers' token is no API key. Required, with an
	// admin token or tenants (Keyring.RequiresSecret).
	Keyring *auth.Keyring
	// AccessKey derives the sandboxes' envd access tokens (LoadAccessKey);
	// at least 16 bytes. Required.
	AccessKey []byte
	// Warm asks every create for a warm start (CreateSandboxRequest.Warm:
	// the template's saved ready state instead of a boot; `serve
	// --e2b-warm`), as the E2B API has no way to ask for one.
	Warm bool
	// Logger gets a line per refused request; nil discards.
	Logger *slog.Logger
	// Now is the clock (tests); nil is time.Now.
	Now func() time.Time
}

// Server is the E2B front: an http.Handler for one listener that serves
// the control plane and routes data-plane requests.
type Server struct {
	cfg     Config
	control http.Handler
	cpu     cpuSamples
}

// New returns the front of cfg. Errors: a required field is missing.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("e2b: no sandbox service client")
	case !cfg.Keyring.RequiresSecret():
		return nil, errors.New("e2b: no API key: the E2B API needs the daemon's token (--token-file) or tenants (--tenants)")
	case len(cfg.AccessKey) < 16:
		return nil, errors.New("e2b: the access key is shorter than 16 bytes")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg}
	mux := http.NewServeMux()
	for _, rt := range s.routes() {
		mux.Handle(rt.pattern, rt.handler)
	}
	mux.HandleFunc("/", s.unsupported)
	s.control = mux
	return s, nil
}

// route is one control-plane route: a ServeMux pattern and its handler.
type route struct {
	pattern string
	handler http.HandlerFunc
}

// routes are the control plane's routes, as the SDK 2.51.0 calls them
// (src/sandbox/sandboxApi.ts).
func (s *Server) routes() []route {
	return []route{
		{"POST /v2/sandboxes", s.create},
		{"GET /v2/sandboxes", s.list},
		{"POST /v2/sandboxes/{id}/connect", s.connect},
		{"GET /sandboxes/{id}", s.get},
		{"DELETE /sandboxes/{id}", s.kill},
		{"POST /sandboxes/{id}/timeout", s.setTimeout},
		{"POST /sandboxes/{id}/pause", s.pause},
		{"GET /sandboxes/{id}/metrics", s.metrics},
	}
}

// ServeHTTP routes a request: one with an E2b-Sandbox-Id header to the
// data plane (serveData), any other to the control plane behind the
// X-API-KEY check.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// No tenant unless the API key names one below: the data plane's
	// access token authorises one sandbox, whoever holds it.
	r = r.WithContext(tenant.With(api.WithCaller(r.Context(), api.Caller{ID: Caller}), nil))
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		s.serveData(w, r, id)
		return
	}
	id, err := s.cfg.Keyring.CheckRequest(r, auth.APIKey)
	if err != nil {
		ae := api.ErrorFrom(err) // 401 unauthorized
		s.refuse(w, r, ae.Status, ae.Code, ae.Message)
		return
	}
	if id.Kind == auth.Tenant {
		r = r.WithContext(tenant.With(r.Context(), id.Tenant))
	}
	s.control.ServeHTTP(w, r)
}

// unsupported answers every route the front does not serve: 501 in
// E2B's shape, saying so.
func (s *Server) unsupported(w http.ResponseWriter, r *http.Request) {
	s.refuse(w, r, http.StatusNotImplemented, api.CodeNotImplemented,
		fmt.Sprintf("%s %s is not supported by agentbox's E2B API (it serves sandbox create, connect, get, list, kill, timeout, pause and metrics; see docs/e2b.md)", r.Method, r.URL.Path))
}

// refuse answers an error the front itself finds, in E2B's shape.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	s.cfg.Logger.Debug("e2b request refused", "method", r.Method, "path", r.URL.Path, "status", status, "code", code)
	writeError(w, api.Errorf(status, code, "%s", msg))
}

// writeError answers err in E2B's error shape through the one error
// table (api.ErrorFrom): the E2B code is the HTTP status, agentbox's
// stable code is error_code. A 429 carries Retry-After: 1, which the SDK
// waits for before it retries (three times, then RateLimitError).
func writeError(w http.ResponseWriter, err error) {
	ae := api.ErrorFrom(err)
	if ae.Status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, ae.Status, apiError{Code: ae.Status, ErrorCode: ae.Code, Message: ae.Message})
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// maxBody bounds a control-plane request body.
const maxBody = 1 << 20

// decode reads r's JSON body into v; an empty body leaves v as it is.
// Unknown fields are ignored (E2B adds fields over time). Errors are 400
// bad_request.
func decode(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "reading the request body: %v", err)
	}
	if len(b) > maxBody {
		return api.Errorf(http.StatusRequestEntityTooLarge, api.CodeTooLarge, "the request body is over %d bytes", maxBody)
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, "the request body is not the JSON the E2B API takes: %v", err)
	}
	return nil
}
