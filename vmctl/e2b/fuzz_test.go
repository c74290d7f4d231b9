package e2b_test

// Fuzz target of the E2B control plane (issue 16's isolation suite): raw
// requests with the right API key, parsed by net/http and served by the
// real front over the fake sandbox service. Whatever the bytes, the front
// never panics or answers 500, and every error is E2B's JSON error with
// the status repeated in it. `make fuzz` runs it for FUZZTIME.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/e2b"
)

func FuzzControlPlane(f *testing.F) {
	for _, s := range [][3]string{
		{"POST", "/v2/sandboxes", `{"templateID":"base","timeout":60,"metadata":{"a":"b"},"envVars":{"A":"1"}}`},
		{"POST", "/v2/sandboxes", `{"templateID":"../../etc","timeout":-1}`},
		{"POST", "/v2/sandboxes", `{"templateID":5}`},
		{"GET", "/v2/sandboxes?metadata=a%3Db&state=running", ""},
		{"POST", "/v2/sandboxes/000000000001/connect", `{"timeout":10}`},
		{"GET", "/sandboxes/..%2F..%2Fstate.db", ""},
		{"DELETE", "/sandboxes/000000000001", ""},
		{"POST", "/sandboxes/000000000001/timeout", `{"timeout":30}`},
		{"POST", "/sandboxes/000000000001/pause", ""},
		{"GET", "/sandboxes/000000000001/metrics?start=1&end=2", ""},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: e2b\r\nX-API-KEY: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", method, target, testKey, len(body))
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + string(body))))
		if err != nil || req.RequestURI == "*" || req.Header.Get("E2b-Sandbox-Id") != "" {
			return // refused by net/http, net/http's ServeMux's ("*": 400), or the data plane's
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		var st store
		b := st.backend()
		st.add("000000000001", "running", map[string]string{"a": "b"}, time.Now())
		as, err := apiserver.NewServer(apiserver.Config{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		front, err := e2b.New(e2b.Config{Client: client.NewHandler(as.Handler()), Data: http.NotFoundHandler(),
			Keyring: auth.New(auth.Config{Admin: testKey}), AccessKey: []byte("0123456789abcdef0123456789abcdef")})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		front.ServeHTTP(rec, req)
		what := method + " " + target
		if rec.Code >= 500 && rec.Code != http.StatusNotImplemented {
			t.Fatalf("%s: status %d: %.500s", what, rec.Code, rec.Body.Bytes())
		}
		if rec.Code >= 400 {
			var e e2bErr
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Code != rec.Code || e.Message == "" {
				t.Fatalf("%s: status %d, body %.500q: want E2B's JSON error with code %d and a message (%v)", what, rec.Code, rec.Body.Bytes(), rec.Code, err)
			}
		}
	})
}
