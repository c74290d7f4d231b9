package mcp

import (
	"net/http"
	"sync"

	"github.com/agentbox/agentbox/vmctl/tenant"
)

// sessionHeader is the streamable HTTP transport's session header.
const sessionHeader = "Mcp-Session-Id"

// tenantSessions binds each streamable HTTP session to the tenant that
// opened it (serve --tenants): a session's tool calls run with the
// context of the request that initialized it, so they act for that
// tenant; a request of another tenant (or of the admin) naming the
// session is answered 404, as for an unknown session, instead of acting
// as the session's tenant.
type tenantSessions struct {
	h http.Handler

	mu     sync.Mutex
	owners map[string]string // session ID → tenant name ("" the admin)
}

// ServeHTTP implements http.Handler.
func (ts *tenantSessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	who := tenant.Name(r.Context())
	if id := r.Header.Get(sessionHeader); id != "" {
		ts.mu.Lock()
		owner, known := ts.owners[id]
		if known && r.Method == http.MethodDelete && owner == who {
			delete(ts.owners, id)
		}
		ts.mu.Unlock()
		if known && owner != who {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		ts.h.ServeHTTP(w, r)
		return
	}
	ts.h.ServeHTTP(&sessionStart{ResponseWriter: w, ts: ts, who: who}, r)
}

// forget drops session id (ended).
func (ts *tenantSessions) forget(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.owners, id)
}

// sessionStart records the session ID an initialize answer hands out.
type sessionStart struct {
	http.ResponseWriter
	ts   *tenantSessions
	who  string
	once sync.Once
}

func (w *sessionStart) record() {
	w.once.Do(func() {
		if id := w.Header().Get(sessionHeader); id != "" {
			w.ts.mu.Lock()
			w.ts.owners[id] = w.who
			w.ts.mu.Unlock()
		}
	})
}

// WriteHeader implements http.ResponseWriter.
func (w *sessionStart) WriteHeader(code int) {
	w.record()
	w.ResponseWriter.WriteHeader(code)
}

// Write implements http.ResponseWriter.
func (w *sessionStart) Write(p []byte) (int, error) {
	w.record()
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher.
func (w *sessionStart) Flush() {
	w.record()
	http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the underlying writer.
func (w *sessionStart) Unwrap() http.ResponseWriter { return w.ResponseWriter }
