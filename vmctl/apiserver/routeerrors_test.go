package apiserver_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// routeError is a request a route answers with an error: refused before
// the backend (setup nil), or with the backend's error that setup
// installs.
type routeError struct {
	name, method, target, body string
	setup                      func(b *backendtest.Fake)
	status                     int
	code                       string
}

// checkRouteErrors serves each case with a server over its own backend
// and checks the answer's status and error code, and that the backend
// was called exactly when the case has a setup.
func checkRouteErrors(t *testing.T, cases []routeError) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &backendtest.Fake{}
			if c.setup != nil {
				c.setup(b)
			}
			status, code := serveOnce(t, b, c.method, c.target, c.body)
			if status != c.status || code != c.code {
				t.Errorf("%s %s: %d %s, want %d %s", c.method, c.target, status, code, c.status, c.code)
			}
			if calls := b.Calls(); (len(calls) > 0) != (c.setup != nil) {
				t.Errorf("backend calls %q, want them = %v", calls, c.setup != nil)
			}
		})
	}
}

// serveOnce answers one request with a server over b and returns the
// status and error code.
func serveOnce(t *testing.T, b *backendtest.Fake, method, target, body string) (int, string) {
	t.Helper()
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(method, "http://localhost"+target, strings.NewReader(body))
	if body != "" {
		r.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, r)
	var er api.ErrorResponse
	json.Unmarshal(rec.Body.Bytes(), &er)
	return rec.Code, er.Error.Code
}
