package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// forkSuccessCases cover the timeout route and restores of several (see
// successCases).
func forkSuccessCases() []apiCase {
	return []apiCase{
		{name: "set timeout", method: "POST", target: sb + "/timeout", ct: "json", body: `{"timeout_seconds":7200}`, status: 200, called: true,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				var v api.Sandbox
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.ExpiresAt == nil || !v.ExpiresAt.Equal(backendtest.Epoch.Add(7200e9)) {
					t.Errorf("answer %s: want expires_at two hours after the fixture's epoch", rec.Body)
				}
			}},
		{name: "restore count 3", method: "POST", target: "/v1/snapshots/before/restore", ct: "json", body: `{"name":"try","count":3}`, status: 201, called: true,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				var v api.SandboxList
				if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
					t.Fatal(err)
				}
				var names []string
				for _, s := range v.Sandboxes {
					names = append(names, s.Name)
				}
				if !slices.Equal(names, []string{"try-1", "try-2", "try-3"}) || rec.Header().Get("Location") != "" {
					t.Errorf("names %v, Location %q: want try-1..3 and no Location", names, rec.Header().Get("Location"))
				}
			}},
		{name: "restore count 1", method: "POST", target: "/v1/snapshots/before/restore", ct: "json", body: `{"name":"one","count":1}`, status: 201, called: true,
			check: header("Location", sb)},
	}
}

// TestForkRouteErrors: bad timeouts and counts are refused before the
// backend; a backend without the optional interfaces answers 501.
func TestForkRouteErrors(t *testing.T) {
	checkRouteErrors(t, []routeError{
		{"timeout zero", "POST", sb + "/timeout", `{"timeout_seconds":0}`, nil, 400, api.CodeInvalidArgument},
		{"timeout missing", "POST", sb + "/timeout", `{}`, nil, 400, api.CodeInvalidArgument},
		{"timeout negative", "POST", sb + "/timeout", `{"timeout_seconds":-5}`, nil, 400, api.CodeInvalidArgument},
		{"timeout too long", "POST", sb + "/timeout", `{"timeout_seconds":315360001}`, nil, 400, api.CodeInvalidArgument},
		{"count negative", "POST", "/v1/snapshots/before/restore", `{"count":-1}`, nil, 400, api.CodeInvalidArgument},
		{"count too many", "POST", "/v1/snapshots/before/restore", `{"count":65}`, nil, 400, api.CodeInvalidArgument},
		{"count name too long", "POST", "/v1/snapshots/before/restore", `{"count":10,"name":"` + strings.Repeat("a", 61) + `"}`, nil, 400, api.CodeInvalidArgument},
	})
}

// TestRestoreCountCapacity: a refused restore of several keeps its status.
func TestRestoreCountCapacity(t *testing.T) {
	b := &backendtest.Fake{}
	b.Fork.RestoreManyFn = func(context.Context, string, api.RestoreRequest) ([]api.Sandbox, error) {
		return nil, api.Errorf(429, api.CodeCapacity, "host capacity exceeded: 4 sandboxes")
	}
	if status, code := serveOnce(t, b, "POST", "/v1/snapshots/before/restore", `{"count":4}`); status != 429 || code != api.CodeCapacity {
		t.Fatalf("answer %d %s, want 429 %s", status, code, api.CodeCapacity)
	}
}
