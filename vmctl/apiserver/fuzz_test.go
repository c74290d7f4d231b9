package apiserver_test

// Fuzz targets of the HTTP handlers (issue 16's isolation suite): raw
// requests parsed by net/http and served by the real handler over the fake
// backend. Whatever the bytes, the server never panics or answers 500,
// every error is the documented JSON with a code, and the backend only
// ever sees requests that passed validation. `make fuzz` runs each for
// FUZZTIME.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// checkAnswer checks the invariants every answer keeps.
func checkAnswer(t *testing.T, what string, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
		t.Fatalf("%s: status %d (a server error for client input): %.500s", what, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		var e api.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s: status %d, body %.500q is not a JSON error with code and message: %v", what, rec.Code, rec.Body.Bytes(), err)
		}
	}
}

// FuzzCreateRequest: any body POSTed to /v1/sandboxes is either refused
// with a JSON error (400, 413, 415) or reaches the backend as a request
// that passes Validate.
func FuzzCreateRequest(f *testing.F) {
	for _, s := range []string{
		`{"image":"/img"}`, `{"template":"base","name":"w1","labels":{"a":"b"},"env":["A=1"]}`,
		`{"image":"../../etc"}`, `{"image":"/i","limits":{"ttl_seconds":-1}}`, `{"image":"/i\u0000"}`,
		`{"image":"/i","network":{"mode":"allowlist","allow":["example.com","10.0.0.0/8:80"]}}`,
		`{"Image":"/i"}`, `{"image":5}`, `[]`, `{"image":"/i"}{}`, "{\"name\":\"\xff\"}", `{"image":"/i","memory_mib":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var got []api.CreateSandboxRequest
		b := &backendtest.Fake{CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			got = append(got, req)
			return backendtest.Sandbox(backendtest.SandboxID), nil
		}}
		srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("POST", "/v1/sandboxes", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		checkAnswer(t, "POST /v1/sandboxes", rec)
		switch rec.Code {
		case http.StatusCreated:
			if len(got) != 1 {
				t.Fatalf("201 with %d backend calls", len(got))
			}
			if err := got[0].Validate(); err != nil {
				t.Fatalf("the backend got a request that fails validation: %v (%+v)", err, got[0])
			}
			if strings.ContainsRune(got[0].Image, 0) {
				t.Fatalf("the backend got an image path with NUL: %q", got[0].Image)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType:
			if len(got) != 0 {
				t.Fatalf("status %d, but the backend was called with %+v", rec.Code, got)
			}
		default:
			t.Fatalf("status %d: want 201, 400, 413 or 415: %.500s", rec.Code, rec.Body.Bytes())
		}
	})
}

// FuzzRoutes: a raw request line, query and body for any route. The
// server never panics or answers 5xx, and every sandbox reference the
// backend receives is a valid one (path values are checked first).
func FuzzRoutes(f *testing.F) {
	for _, s := range [][3]string{
		{"GET", "/v1/sandboxes/work1", ""},
		{"GET", "/v1/sandboxes/..%2F..%2Fetc/console?tail=10", ""},
		{"DELETE", "/v1/sandboxes/0123456789ab?force=true", ""},
		{"POST", "/v1/sandboxes/work1/exec", `{"cmd":["true"]}`},
		{"POST", "/v1/sandboxes/work1/processes", `{"cmd":["sleep","1"],"env":["A=1"]}`},
		{"GET", "/v1/sandboxes/work1/files?path=/etc/../x", ""},
		{"PUT", "/v1/sandboxes/work1/files?path=/w/a&mode=0644&parents=true", "data"},
		{"POST", "/v1/sandboxes/work1/files/move", `{"from":"/a","to":"/b"}`},
		{"POST", "/v1/sandboxes/work1/snapshots", `{"name":"../s"}`},
		{"POST", "/v1/snapshots/s1/restore", `{"count":2,"name":"f"}`},
		{"DELETE", "/v1/warm/0123456789abcdef01234567", ""},
		{"POST", "/v1/sandboxes/work1/processes/abc/kill", `{"signal":"KILL"}`},
		{"POST", "/v1/sandboxes/work1/ports", `{"port":8000}`},
		{"GET", "/v1/sandboxes?label=a%3Db&state=running", ""},
		{"POST", "/v1/sandboxes/work1/timeout", `{"timeout_seconds":5}`},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		// Streams that wait for events by design are not this target's.
		if strings.Contains(target, "/events") || strings.Contains(target, "follow") || strings.Contains(target, "/watch") || strings.Contains(target, "/ws") {
			return
		}
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: agentbox\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, target, len(body))
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + string(body))))
		if err != nil || req.RequestURI == "*" {
			return // refused by net/http, or net/http's ServeMux's ("*": 400)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		b := &backendtest.Fake{}
		srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		what := method + " " + target
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s: status %d: %.500s", what, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 && rec.Code != http.StatusMethodNotAllowed || rec.Code == http.StatusMethodNotAllowed && rec.Body.Len() > 0 {
			checkAnswer(t, what, rec)
		}
		for _, c := range b.Calls() {
			if err := checkCall(c); err != nil {
				t.Fatalf("%s: the backend got call %q: %v", what, c, err)
			}
		}
	})
}

// checkCall checks the argument of one recorded backend call ("Method
// arg"): the validity its route promises.
func checkCall(c string) error {
	m, arg, _ := strings.Cut(c, " ")
	switch m {
	case "Info", "Events", "ListSandboxes", "ListTemplates", "ListWarm", "signal", "resize":
		return nil
	case "Audit", "ListSnapshots", "CreateSandbox":
		if arg == "" {
			return nil
		}
	case "DeleteWarm":
		return api.CheckWarmKey(arg)
	case "GetSnapshot", "DeleteSnapshot", "RestoreSnapshot", "RestoreSnapshots":
		return api.CheckSnapshotRef(arg)
	}
	return api.CheckRef(arg)
}
