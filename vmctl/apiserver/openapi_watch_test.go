package apiserver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// watchSuccessCases cover the watch route (see successCases).
func watchSuccessCases() []apiCase {
	return []apiCase{
		{name: "watch", method: "GET", target: sb + "/files/watch?path=/work&recursive=true", status: 200, called: true, check: lines(4)},
		{name: "watch error after start", method: "GET", target: sb + "/files/watch?path=/work", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.WatchFn = func(_ context.Context, _, _ string, _ bool, ready func() error, _ func(api.WatchEvent) error) error {
				if err := ready(); err != nil {
					return err
				}
				return api.Errorf(409, api.CodeNotRunning, "sandbox stopped")
			}
		}, check: bodyHas(`{"op":"ERROR","error":{`)},
		{name: "watch ready without events", method: "GET", target: sb + "/files/watch?path=/work", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.WatchFn = func(_ context.Context, _, _ string, _ bool, ready func() error, _ func(api.WatchEvent) error) error {
				return ready()
			}
		}, check: lines(0)},
	}
}

func bodyHas(sub string) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if !strings.Contains(rec.Body.String(), sub) {
			t.Errorf("body %q does not contain %q", rec.Body, sub)
		}
	}
}

// TestWatchRoute: the arguments reach the backend checked; an error before
// the watch is in place is an ordinary error answer; the stream's lines
// are WatchEvents.
func TestWatchRoute(t *testing.T) {
	checkRouteErrors(t, []routeError{
		{"no path", "GET", sb + "/files/watch", "", nil, 400, api.CodeInvalidArgument},
		{"relative path", "GET", sb + "/files/watch?path=work", "", nil, 400, api.CodeInvalidArgument},
		{"bad recursive", "GET", sb + "/files/watch?path=/work&recursive=maybe", "", nil, 400, api.CodeBadRequest},
		{"unknown parameter", "GET", sb + "/files/watch?path=/work&follow=true", "", nil, 400, api.CodeBadRequest},
		{"missing path", "GET", sb + "/files/watch?path=/nope", "", func(b *backendtest.Fake) {
			b.WatchFn = func(context.Context, string, string, bool, func() error, func(api.WatchEvent) error) error {
				return api.Errorf(404, api.CodeNotFound, "watch /nope: no such file or directory")
			}
		}, 404, api.CodeNotFound},
	})

	var got struct {
		path      string
		recursive bool
	}
	b := &backendtest.Fake{WatchFn: func(ctx context.Context, ref, p string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error {
		got.path, got.recursive = p, recursive
		return ready()
	}}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost"+sb+"/files/watch?path=/work/./a/&recursive=true", nil))
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != api.ContentTypeNDJSON || got.path != "/work/a" || !got.recursive {
		t.Fatalf("answer %d %q, backend got %+v", rec.Code, rec.Header().Get("Content-Type"), got)
	}
}
