package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/envd"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// startMCP mounts the MCP server of o at /mcp of srv (nil o: none, and a
// nil close); its tools reach the daemon through srv's own handler in
// memory (client.NewHandler), so every call goes through the API. The
// returned function ends the MCP sessions (cleaning up with
// mcp.Config.Cleanup) and is to be called before srv's Shutdown.
func startMCP(o *MCPOptions, srv *apiserver.Server) (closeMCP func() error, err error) {
	if o == nil {
		return nil, nil
	}
	cfg := o.Config
	cfg.Client = client.NewHandler(srv.Handler())
	m, err := mcp.New(cfg)
	if err != nil {
		return nil, err
	}
	srv.Handle("/mcp", m.HTTPHandler(o.SessionTimeout))
	return m.Close, nil
}

// E2BReadHeaderTimeout bounds how long an E2B client (serve
// --e2b-listen) may take to send a request's line and headers, as the
// API's (apiserver.ReadHeaderTimeout, 10 s): a client that trickles them
// (slowloris) is cut off then, and holds no connection longer. Bodies and
// responses have none: they are streams (process output, uploads).
const E2BReadHeaderTimeout = apiserver.ReadHeaderTimeout

// E2BIdleTimeout closes an E2B client's keep-alive connection (HTTP/1.1
// or HTTP/2) that waits this long for its next request, as the API's
// default (apiserver.Config.IdleTimeout, 2 minutes).
const E2BIdleTimeout = 2 * time.Minute

// e2bFront is the E2B API's listener and server (`serve --e2b-listen`).
type e2bFront struct {
	ln  net.Listener
	srv *http.Server
}

// newE2BFront makes the E2B front of o over srv's own handler
// (client.NewHandler: every call goes through the API), listening but
// not yet serving; nil without o. E2B's templateIDs are the daemon's
// templates; without one named base (the SDK's default) say is told so.
// The envd access key lives in stateDir. The API keys are those of the
// daemon's keyring keys (e2bAuth): its admin token and, with tenants, a
// tenant's token, acting for its tenant. Errors: no token nor tenants
// (the API key is the daemon's token), the key or the listener.
func newE2BFront(o *E2BOptions, keys *auth.Keyring, srv *apiserver.Server, templates []daemon.Template, stateDir string, logger *slog.Logger, say func(string)) (*e2bFront, error) {
	if o == nil {
		return nil, nil
	}
	cfg := e2b.Config{Warm: o.Warm, Logger: logger}
	if !e2bAuth(keys, &cfg) { // auth.go
		return nil, errors.New("--e2b-listen needs --token-file (or --tenants): its token is the API key E2B clients send (E2B_API_KEY)")
	}
	if !slices.ContainsFunc(templates, func(t daemon.Template) bool { return t.Name == api.DefaultTemplate }) {
		say(fmt.Sprintf("note: no template named %s: the E2B SDK's Sandbox.create() without a template will fail; add --template %s=DIR|PROFILE", api.DefaultTemplate, api.DefaultTemplate))
	}
	key, err := e2b.LoadAccessKey(stateDir)
	if err != nil {
		return nil, err
	}
	cl := client.NewHandler(srv.Handler())
	cfg.Client, cfg.Data, cfg.AccessKey = cl, envd.NewHandler(cl, envd.Options{}), key
	front, err := e2b.New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("--e2b-listen: %w", err)
	}
	hs := &http.Server{
		Handler:           front,
		ReadHeaderTimeout: E2BReadHeaderTimeout,
		IdleTimeout:       E2BIdleTimeout,
		MaxHeaderBytes:    apiserver.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	// HTTP/1.1, and HTTP/2 without TLS (prior knowledge) for clients that
	// speak it; the SDK's undici uses HTTP/1.1 over http://.
	hs.Protocols = new(http.Protocols)
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	return &e2bFront{ln: ln, srv: hs}, nil
}

// serve serves the front until shutdown, sending a failure to errc.
func (f *e2bFront) serve(errc chan<- error) {
	if f == nil {
		return
	}
	go func() {
		if err := f.srv.Serve(f.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("E2B listener: %w", err)
		}
	}()
}

// addr is the front's address, "" without one.
func (f *e2bFront) addr() string {
	if f == nil {
		return ""
	}
	return f.ln.Addr().String()
}

// shutdown stops accepting and waits for the front's requests until ctx
// ends (then cuts them), before the API server's own shutdown. A front
// never served (a later step of Start failed) closes its listener.
func (f *e2bFront) shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	err := f.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		f.srv.Close()
	}
	f.ln.Close() // closed already when served
	return err
}
