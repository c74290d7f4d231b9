package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/envd"
)

// serveE2BFlags are `serve`'s E2B flags.
func serveE2BFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "e2b-listen", Usage: "also serve the E2B API (control and data plane, for the unmodified e2b SDK) on TCP `ADDR` (host:port); needs --token-file or --tenants: the admin's or a tenant's token is the SDK's E2B_API_KEY"},
		&cli.BoolFlag{Name: "e2b-warm", Usage: "start every E2B sandbox warm (as create --warm does: from its template's saved ready state; the first create of a template and shape boots once to save it), as the E2B API has no way to ask"},
	}
}

// e2bFront is the E2B API's listener and server (`serve --e2b-listen`).
type e2bFront struct {
	ln  net.Listener
	srv *http.Server
}

// serveE2B makes the E2B front of --e2b-listen over srv's own handler
// (client.NewHandler: every call goes through the API), listening but
// not yet serving; nil without --e2b-listen. E2B's templateIDs are the
// daemon's templates (serve --template); without one named base (the
// SDK's default) a note on stderr says so. The envd access key lives in
// stateDir. The API keys are those of the daemon's keyring (keys): its
// admin token and, with tenants, a tenant's token, acting for its tenant.
// Errors: no token nor tenants (the API key is the daemon's token), the
// key or the listener.
func serveE2B(c *cli.Context, srv *apiserver.Server, templates []daemon.Template, stateDir string, keys *auth.Keyring, logger *slog.Logger) (*e2bFront, error) {
	addr := c.String("e2b-listen")
	if addr == "" {
		return nil, nil
	}
	if !keys.RequiresSecret() {
		return nil, errors.New("--e2b-listen needs --token-file (or --tenants): its token is the API key E2B clients send (E2B_API_KEY)")
	}
	if !slices.ContainsFunc(templates, func(t daemon.Template) bool { return t.Name == api.DefaultTemplate }) {
		fmt.Fprintf(c.App.ErrWriter, "agentbox serve: note: no template named %s: the E2B SDK's Sandbox.create() without a template will fail; add --template %s=DIR|PROFILE\n", api.DefaultTemplate, api.DefaultTemplate)
	}
	key, err := e2b.LoadAccessKey(stateDir)
	if err != nil {
		return nil, err
	}
	cl := client.NewHandler(srv.Handler())
	front, err := e2b.New(e2b.Config{
		Client:    cl,
		Data:      envd.NewHandler(cl, envd.Options{}),
		Keyring:   keys, // a tenant's token is its API key
		AccessKey: key,
		Warm:      c.Bool("e2b-warm"),
		Logger:    logger,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--e2b-listen: %w", err)
	}
	hs := &http.Server{Handler: front, ReadHeaderTimeout: 30 * time.Second, MaxHeaderBytes: apiserver.MaxHeaderBytes, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
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
// ends (then cuts them), before the API server's own shutdown.
func (f *e2bFront) shutdown(ctx context.Context) error {
	if f == nil {
		return nil
	}
	err := f.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		f.srv.Close()
	}
	return err
}
