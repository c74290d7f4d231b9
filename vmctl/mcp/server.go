package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// SessionLabel is the label every sandbox created or restored through an
// MCP session carries, its value the session's ID: `agentbox ls -l
// agentbox.mcp-session=ID` lists them, and Config.Cleanup removes them
// when the session ends.
const SessionLabel = "agentbox.mcp-session"

// DefaultOutputLimit is the default of Config.OutputLimit: 64 KiB.
const DefaultOutputLimit = 64 << 10

// DefaultFileLimit is the default of Config.FileLimit: 8 MiB.
const DefaultFileLimit = 8 << 20

// cleanupTimeout bounds the removal of a session's sandboxes.
const cleanupTimeout = 2 * time.Minute

// Config is what a Server is made with.
type Config struct {
	// Client reaches the sandbox service (the daemon over its socket or
	// TCP, the in-process service, or the daemon's own handler through
	// client.NewHandler). Required.
	Client *client.Client
	// Version is reported to MCP clients as the server's version.
	Version string
	// DefaultImage is create_sandbox's image when the call names neither
	// image nor template ("" : one of them is required).
	DefaultImage string
	// ResolveTemplate turns create_sandbox's template (a profile name,
	// e.g. "python") into an image directory on the daemon's host; nil
	// refuses templates (invalid_argument).
	ResolveTemplate func(ctx context.Context, name string) (string, error)
	// OutputLimit bounds the stdout and the stderr that run_command and
	// read_process_output return, each, in bytes: what is over it is cut
	// from the middle (the first and last halves are kept) and the answer
	// says how many bytes were cut. 0 means DefaultOutputLimit.
	OutputLimit int
	// FileLimit is the largest file read_file returns and the largest
	// content write_file takes, in bytes. 0 means DefaultFileLimit.
	FileLimit int64
	// Cleanup removes a session's sandboxes (those labelled SessionLabel
	// with its ID) and then the snapshots it took (snapshot tool) when the
	// session ends: stdin closed (stdio), DELETE, idle timeout or shutdown
	// (HTTP).
	Cleanup bool
	// ProgressInterval is how often run_command reports progress to a
	// client that asked for it (a progress token); 0 means 1 s.
	ProgressInterval time.Duration
	// Logger logs sessions and cleanups; nil discards.
	Logger *slog.Logger
}

// Server is agentbox's MCP server: tools and resources that translate
// MCP calls into calls of the sandbox service's API through Config.Client
// (no second copy of create, exec or error mapping). One Server serves
// any number of sessions, over stdio (Serve) or streamable HTTP
// (HTTPHandler). It is safe for concurrent use.
type Server struct {
	cfg    Config
	cl     *client.Client
	log    *slog.Logger
	srv    *sdk.Server
	outLim int
	fileLm int64

	mu       sync.Mutex
	sessions map[*sdk.ServerSession]string
	ending   int        // sessions whose end (and cleanup) is not done yet
	ended    *sync.Cond // on mu: signalled when ending goes down
	closed   bool       // Close was called: a session that starts now is closed at once

	snaps map[string]map[string]bool // on mu: session ID → IDs of the snapshots it took (snapshots.go)

	tenants *tenantSessions // HTTP sessions' tenants (tenant.go); nil before HTTPHandler
}

// New checks cfg and returns a Server with every tool and resource
// template registered. Errors: no Client.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("mcp: Config.Client is nil")
	}
	s := &Server{
		cfg:      cfg,
		cl:       cfg.Client,
		log:      cfg.Logger,
		outLim:   cfg.OutputLimit,
		fileLm:   cfg.FileLimit,
		sessions: make(map[*sdk.ServerSession]string),
		snaps:    make(map[string]map[string]bool),
	}
	s.ended = sync.NewCond(&s.mu)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.outLim <= 0 {
		s.outLim = DefaultOutputLimit
	}
	if s.fileLm <= 0 {
		s.fileLm = DefaultFileLimit
	}
	if s.cfg.ProgressInterval <= 0 {
		s.cfg.ProgressInterval = time.Second
	}
	version := cfg.Version
	if version == "" {
		version = "dev"
	}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "agentbox", Title: "agentbox sandboxes", Version: version}, &sdk.ServerOptions{
		Instructions: instructions,
		Logger:       sdkLogger(s.log),
		InitializedHandler: func(ctx context.Context, req *sdk.InitializedRequest) {
			s.sessionID(req.Session)
		},
	})
	s.srv.AddReceivingMiddleware(argumentErrors)
	s.addTools()
	s.addResources()
	return s, nil
}

// instructions is what the server tells a client's model about itself.
const instructions = "agentbox runs Linux virtual machines (sandboxes) for you. Create one with create_sandbox, " +
	"run commands in it with run_command (or start_process for long-running ones), move files with " +
	"write_file/read_file/list_directory, and destroy it with destroy_sandbox when done. Sandboxes are " +
	"referred to by ID or name. Errors start with a stable code such as not_found, conflict, invalid_argument."

// sessionID returns ss's ID, making one on first use and, for a session
// that ends, removing its sandboxes when Config.Cleanup is set. A
// streamable HTTP session has the Mcp-Session-Id; a stdio session (which
// has none) gets 16 random hex digits.
func (s *Server) sessionID(ss *sdk.ServerSession) string {
	if ss == nil {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.sessions[ss]; ok {
		return id
	}
	id := ss.ID()
	if id == "" || len(id) > 256 {
		var b [8]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	s.sessions[ss] = id
	s.ending++
	late := s.closed
	go func() {
		defer func() {
			s.mu.Lock()
			s.ending--
			s.ended.Broadcast()
			s.mu.Unlock()
		}()
		if late {
			// It began while Close ran: end it as Close ended the others
			// (not here: Close waits for the calls in flight, this one
			// among them).
			ss.Close()
		}
		ss.Wait()
		s.mu.Lock()
		delete(s.sessions, ss)
		ts := s.tenants
		s.mu.Unlock()
		if ts != nil {
			ts.forget(id)
		}
		s.log.Info("MCP session ended", "session", id)
		if s.cfg.Cleanup {
			s.cleanup(id)
		} else {
			s.sessionSnapshots(id, true) // forget them
		}
	}()
	s.log.Info("MCP session started", "session", id)
	return id
}

// cleanup removes the sandboxes of session id (labelled SessionLabel=id),
// then the snapshots it took, logging what fails.
func (s *Server) cleanup(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	defer s.cleanupSnapshots(ctx, id)
	list, err := s.cl.ListSandboxes(ctx, map[string]string{SessionLabel: id}, "")
	if err != nil {
		s.log.Error("MCP session cleanup: listing its sandboxes failed", "session", id, "err", err)
		return
	}
	for _, sb := range list {
		if err := s.cl.DeleteSandbox(ctx, sb.ID, true); err != nil && !api.HasCode(err, api.CodeNotFound) {
			s.log.Error("MCP session cleanup: removing a sandbox failed", "session", id, "sandbox", sb.ID, "err", err)
			continue
		}
		s.log.Info("MCP session cleanup: sandbox removed", "session", id, "sandbox", sb.ID)
	}
}

// Serve serves one session over t (NewStdioTransport for `agentbox mcp`)
// until the client ends it (closes stdin) or ctx ends; then, with
// Config.Cleanup, it removes the session's sandboxes and snapshots before
// it returns. The end of ctx (SIGTERM) is a clean end: nil, and nothing
// logged as an error.
func (s *Server) Serve(ctx context.Context, t sdk.Transport) error {
	// Not sdk.Server.Run: it logs the end of ctx as an error.
	ss, err := s.srv.Connect(ctx, t, nil)
	if err != nil {
		return err
	}
	waited := make(chan error, 1)
	go func() { waited <- ss.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		ss.Close()
		<-waited
		err = nil
	}
	s.waitEnded()
	return err
}

// HTTPHandler returns the streamable HTTP handler of the MCP protocol
// (one endpoint: POST, GET and DELETE), for `serve --mcp` at /mcp. It does
// no authentication of its own: mount it behind the API's
// (apiserver.Server.Handle). A session idle for idle (0: never) is
// closed, and then cleaned up like one the client ended. A session acts
// for the tenant (vmctl/tenant) of the request that opened it and
// answers only that tenant's requests (tenant.go).
func (s *Server) HTTPHandler(idle time.Duration) http.Handler {
	ts := &tenantSessions{owners: map[string]string{}, h: sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:         sdkLogger(s.log),
		SessionTimeout: idle,
	})}
	s.mu.Lock()
	s.tenants = ts
	s.mu.Unlock()
	return ts
}

// Close ends every open session (as if each client had left: with
// Config.Cleanup their sandboxes and snapshots are removed) and waits for their
// cleanups, for the daemon's shutdown. A session that begins while Close
// runs is ended at once too, and waited for.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var open []*sdk.ServerSession
	for ss := range s.sessions {
		open = append(open, ss)
	}
	s.mu.Unlock()
	var errs []error
	for _, ss := range open {
		if err := ss.Close(); err != nil {
			errs = append(errs, fmt.Errorf("closing MCP session: %w", err))
		}
	}
	s.waitEnded()
	return errors.Join(errs...)
}

// waitEnded waits until every session that ended was cleaned up (also
// those that began meanwhile, e.g. during Close).
func (s *Server) waitEnded() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.ending > 0 {
		s.ended.Wait()
	}
}

// sdkLogger is the MCP SDK's logger: log's warnings and errors (its info
// lines, one per session and request, only at debug level).
func sdkLogger(log *slog.Logger) *slog.Logger {
	return slog.New(&minLevel{Handler: log.Handler(), min: slog.LevelWarn})
}

// minLevel drops records below min unless its handler logs debug.
type minLevel struct {
	slog.Handler
	min slog.Level
}

// Enabled implements slog.Handler.
func (h *minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	if h.Handler.Enabled(ctx, slog.LevelDebug) {
		return true
	}
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

// WithAttrs implements slog.Handler.
func (h *minLevel) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &minLevel{Handler: h.Handler.WithAttrs(attrs), min: h.min}
}

// WithGroup implements slog.Handler.
func (h *minLevel) WithGroup(name string) slog.Handler {
	return &minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
