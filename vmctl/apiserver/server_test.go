package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// guard is how long a test waits for something that must happen before it
// calls it a hang (a deadlock guard, not a speed assertion).
const guard = time.Minute

func newServer(t *testing.T, cfg apiserver.Config) *apiserver.Server {
	t.Helper()
	srv, err := apiserver.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// shortTempDir is a temp dir short enough for unix socket paths.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve serves srv on l until the test ends.
func serve(t *testing.T, srv *apiserver.Server, l net.Listener) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}

func decodeError(t *testing.T, resp *http.Response) api.Error {
	t.Helper()
	var er api.ErrorResponse
	if err := json.NewDecoder(resp.Body).Decode(&er); err != nil {
		t.Fatalf("decoding the error answer: %v", err)
	}
	return er.Error
}

func TestUnknownRouteAndMethod(t *testing.T) {
	b := &backendtest.Fake{}
	h := newServer(t, apiserver.Config{Backend: b}).Handler()
	for _, c := range []struct {
		method, target string
		status         int
		code, allow    string
	}{
		{"GET", "/v1/nope", 404, api.CodeNotFound, ""},
		{"GET", "/", 404, api.CodeNotFound, ""},
		{"GET", "/v2/info", 404, api.CodeNotFound, ""},
		{"GET", "/v1/sandboxes/x/y/z", 404, api.CodeNotFound, ""},
		{"GET", "/v1/sandboxes/a/b", 404, api.CodeNotFound, ""},
		{"POST", "/v1/info", 405, api.CodeMethodNotAllowed, "GET, HEAD"},
		{"PATCH", "/v1/sandboxes/abc", 405, api.CodeMethodNotAllowed, "DELETE, GET, HEAD"},
		{"GET", "/v1/sandboxes/abc/exec", 405, api.CodeMethodNotAllowed, "POST"},
		{"HEAD", "/v1/info", 405, api.CodeMethodNotAllowed, "GET"},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(c.method, c.target, nil))
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q", c.method, c.target, rec.Code, rec.Header().Get("Allow"), c.status, c.allow)
		}
		if c.method == "HEAD" {
			continue
		}
		var er api.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil || er.Error.Code != c.code || er.Error.Message == "" {
			t.Errorf("%s %s: body %q, want a JSON %s error", c.method, c.target, rec.Body, c.code)
		}
	}
	if calls := b.Calls(); len(calls) != 0 {
		t.Errorf("backend called: %v", calls)
	}
}

// readLines reads ndjson ExecEvents until EOF.
func readEvents(t *testing.T, r io.Reader) []api.ExecEvent {
	t.Helper()
	var evs []api.ExecEvent
	dec := json.NewDecoder(r)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err == io.EOF {
			return evs
		} else if err != nil {
			t.Fatalf("decoding the stream: %v", err)
		}
		evs = append(evs, ev)
	}
}

func TestExecErrorAfterStartIsAnErrorEvent(t *testing.T) {
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e9", 3)
		stdout.Write([]byte("partial"))
		return api.ExitStatus{}, api.Errorf(503, api.CodeGuestDied, "the guest died: restart the sandbox")
	}}
	rec := httptest.NewRecorder()
	newServer(t, apiserver.Config{Backend: b}).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/sandboxes/w/exec", strings.NewReader(`{"cmd":["x"]}`)))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != api.ContentTypeNDJSON {
		t.Fatalf("status %d type %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	evs := readEvents(t, rec.Body)
	if len(evs) != 3 || evs[0].Type != "started" || evs[0].ExecID != "e9" || evs[0].Pid != 3 ||
		evs[1].Type != "stdout" || string(evs[1].Data) != "partial" || evs[1].Offset != 0 ||
		evs[2].Type != "error" || evs[2].Error == nil || evs[2].Error.Code != api.CodeGuestDied || evs[2].Error.Message != "the guest died: restart the sandbox" {
		t.Fatalf("events %+v", evs)
	}
}

func TestExecSplitsBigWritesWithOffsets(t *testing.T) {
	data := make([]byte, 200<<10)
	rand.Read(data)
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		if n, err := stdout.Write(data); n != len(data) || err != nil {
			t.Errorf("stdout.Write = %d, %v", n, err)
		}
		stderr.Write([]byte("e"))
		return api.ExitStatus{ExitCode: 3, DurationMs: 1}, nil
	}}
	rec := httptest.NewRecorder()
	newServer(t, apiserver.Config{Backend: b}).Handler().ServeHTTP(rec, httptest.NewRequest("POST", "/v1/sandboxes/w/exec", strings.NewReader(`{"cmd":["x"]}`)))
	evs := readEvents(t, rec.Body)
	var got []byte
	var offsets []int64
	for _, ev := range evs[1 : len(evs)-2] {
		if ev.Type != "stdout" || len(ev.Data) > 64<<10 {
			t.Fatalf("event %s with %d bytes", ev.Type, len(ev.Data))
		}
		offsets = append(offsets, ev.Offset)
		got = append(got, ev.Data...)
	}
	if string(got) != string(data) || fmt.Sprint(offsets) != "[0 65536 131072 196608]" {
		t.Errorf("stdout differs (%d bytes) or offsets %v", len(got), offsets)
	}
	if e := evs[len(evs)-2]; e.Type != "stderr" || e.Offset != int64(len(data)) {
		t.Errorf("stderr event %+v", e)
	}
	if e := evs[len(evs)-1]; e.Type != "exit" || e.Exit.ExitCode != 3 {
		t.Errorf("last event %+v", e)
	}
}

// logBuffer collects a server's log lines (safe for the handlers'
// goroutines).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestExecStreamsAndDisconnectCancels: events reach the client while the
// command runs (flushed per event), and a client that goes away cancels
// the backend's context; the backend's context error is then a client
// cancel (Debug log), not a 500 internal error (Error log, counted).
func TestExecStreamsAndDisconnectCancels(t *testing.T) {
	release := make(chan struct{})
	cancelled := make(chan error, 1)
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		stdout.Write([]byte("first"))
		<-release
		<-ctx.Done()
		cancelled <- ctx.Err()
		return api.ExitStatus{}, ctx.Err()
	}}
	var logs logBuffer
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ts := httptest.NewServer(newServer(t, apiserver.Config{Backend: b, Logger: logger, Registerer: reg}).Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", ts.URL+"/v1/sandboxes/w/exec", strings.NewReader(`{"cmd":["sleep","1000"]}`))
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for _, want := range []string{"started", "stdout"} {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil || ev.Type != want {
			t.Fatalf("event %+v, %v; want %s while the command still runs", ev, err, want)
		}
	}
	close(release)
	cancel()
	if err := testenv.Receive(t, guard, "the backend's context to end", cancelled); !errors.Is(err, context.Canceled) {
		t.Errorf("backend ctx error %v", err)
	}
	ts.Close() // waits for the handler to return
	out := logs.String()
	if strings.Contains(out, "level=ERROR") || strings.Contains(out, "status=500") || !strings.Contains(out, `level=DEBUG msg="API request abandoned by the client" route=/v1/sandboxes/{id}/exec`) {
		t.Errorf("server log of a client-cancelled exec:\n%s", out)
	}
	if got := counterValue(t, reg, "agentbox_api_errors_total", "code", api.CodeInternal); got != 0 {
		t.Errorf("errors_total{code=internal} = %v after a client cancel, want 0", got)
	}
}

// TestStreamFailureCutsTheConnection: a download or audit stream whose
// backend fails after the answer began ends with a broken body, not a
// clean end.
func TestStreamFailureCutsTheConnection(t *testing.T) {
	b := &backendtest.Fake{
		DownloadFn: func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
			w := open(backendtest.File(path, 1<<20))
			w.Write(make([]byte, 100<<10)) // more than net/http buffers: the 200 goes out
			return errors.New("agent connection lost")
		},
		ConsoleFn: func(ctx context.Context, ref string, tail int64, w io.Writer) error {
			w.Write([]byte(strings.Repeat("line\n", 20<<10)))
			return errors.New("log file vanished")
		},
	}
	reg := prometheus.NewRegistry()
	ts := httptest.NewServer(newServer(t, apiserver.Config{Backend: b, Registerer: reg}).Handler())
	defer ts.Close()
	for _, target := range []string{"/v1/sandboxes/w/files?path=/a", "/v1/sandboxes/w/console"} {
		resp, err := ts.Client().Get(ts.URL + target)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%s: reading the body: %v, want unexpected EOF", target, err)
		}
	}
	if got := counterValue(t, reg, "agentbox_api_errors_total", "code", api.CodeInternal); got != 2 {
		t.Errorf("errors_total{code=internal} = %v, want 2", got)
	}
}

// TestDownloadErrorBeforeTheFirstByte: a Download that opens the file
// but fails before writing is an ordinary error answer, without the
// file's headers.
func TestDownloadErrorBeforeTheFirstByte(t *testing.T) {
	b := &backendtest.Fake{DownloadFn: func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
		open(backendtest.File(path, 100))
		return api.Errorf(503, api.CodeGuestDied, "guest died")
	}}
	rec := httptest.NewRecorder()
	newServer(t, apiserver.Config{Backend: b}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/sandboxes/w/files?path=/a", nil))
	if rec.Code != 503 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Content-Length") != "" || rec.Header().Get(api.HeaderMode) != "" {
		t.Errorf("%d %v %s", rec.Code, rec.Header(), rec.Body)
	}
	// An empty file is an empty 200 with its headers.
	b.DownloadFn = func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
		open(backendtest.File(path, 0))
		return nil
	}
	rec = httptest.NewRecorder()
	newServer(t, apiserver.Config{Backend: b}).Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/sandboxes/w/files?path=/a", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Length") != "0" || rec.Header().Get(api.HeaderMode) != "0644" || rec.Body.Len() != 0 {
		t.Errorf("empty file: %d %v %q", rec.Code, rec.Header(), rec.Body)
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	b := &backendtest.Fake{}
	h := newServer(t, apiserver.Config{Backend: b, Registerer: reg}).Handler()
	for _, target := range []string{"/v1/info", "/v1/sandboxes/..", "/v1/sandboxes/a%2Fb", "/v1/nope"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", target, nil))
	}
	if got := counterValue(t, reg, "agentbox_api_errors_total", "code", api.CodeInvalidArgument); got != 2 {
		t.Errorf("errors_total{invalid_argument} = %v, want 2", got)
	}
	if got := counterValue(t, reg, "agentbox_api_errors_total", "code", api.CodeNotFound); got != 1 {
		t.Errorf("errors_total{not_found} = %v, want 1", got)
	}
	mfs, _ := reg.Gather()
	found := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "agentbox_api_request_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			found[strings.Join(ls, ",")] = m.GetHistogram().GetSampleCount()
		}
	}
	want := map[string]uint64{
		"method=GET,route=/v1/info,status=200":           1,
		"method=GET,route=/v1/sandboxes/{id},status=400": 1,
		"method=GET,route=unmatched,status=400":          1,
		"method=GET,route=unmatched,status=404":          1,
	}
	if fmt.Sprint(found) != fmt.Sprint(want) {
		t.Errorf("duration histogram series %v, want %v", found, want)
	}
	// Registering twice is an error, not a panic.
	if _, err := apiserver.NewServer(apiserver.Config{Backend: b, Registerer: reg}); err == nil {
		t.Error("a second NewServer on the same registry succeeded")
	}
}

func TestNewServerChecks(t *testing.T) {
	b := &backendtest.Fake{}
	for _, c := range []struct {
		cfg  apiserver.Config
		want string
	}{
		{apiserver.Config{}, "Backend is nil"},
		{apiserver.Config{Backend: b, Token: "short"}, "at least 16"},
		{apiserver.Config{Backend: b, Token: "0123456789abcdef 0123"}, "white space"},
		{apiserver.Config{Backend: b, TLS: &tls.Config{}}, "no certificate"},
		{apiserver.Config{Backend: b, Token: "0123456789abcdef", Keyring: auth.New(auth.Config{Admin: "fedcba9876543210"})}, "does not hold Config.Token"},
		{apiserver.Config{Backend: b, Keyring: auth.New(auth.Config{Admin: "0123456789abcdef"})}, "does not hold Config.Token"},
		{apiserver.Config{Backend: b, Keyring: auth.New(auth.Config{Peer: "0123456789abcdef"})}, "needs the cluster peers' token"},
	} {
		if _, err := apiserver.NewServer(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewServer(%+v) = %v, want an error containing %q", c.cfg, err, c.want)
		}
	}
	if _, err := apiserver.NewServer(apiserver.Config{Backend: b, Token: " 0123456789abcdef\n"}); err != nil {
		t.Errorf("a token with a newline: %v", err)
	}
	if _, err := apiserver.NewServer(apiserver.Config{Backend: b, Token: "0123456789abcdef", Keyring: auth.New(auth.Config{Admin: "0123456789abcdef\n"})}); err != nil {
		t.Errorf("a keyring of the token: %v", err)
	}
	// A Router needs the peers' token in the keyring, and has it there.
	if _, err := apiserver.NewServer(apiserver.Config{Backend: b, Router: noRouter{}}); err == nil || !strings.Contains(err.Error(), "needs the cluster peers' token") {
		t.Errorf("a Router without the peers' token: %v", err)
	}
	if _, err := apiserver.NewServer(apiserver.Config{Backend: b, Router: noRouter{}, Keyring: auth.New(auth.Config{Peer: "0123456789abcdef"})}); err != nil {
		t.Errorf("a Router with the peers' token: %v", err)
	}
}

// noRouter is an apiserver.Router that routes nothing, for NewServer's
// checks.
type noRouter struct{}

func (noRouter) Peer(*http.Request, bool) (context.Context, error)              { return nil, nil }
func (noRouter) Route(http.ResponseWriter, *http.Request, string) (bool, error) { return false, nil }
func (noRouter) List(_ *http.Request, local []api.Sandbox) ([]api.Sandbox, error) {
	return local, nil
}
func (noRouter) CreateSecrets(context.Context, string) ([]api.SecretSpec, error) { return nil, nil }

func TestTCPRefusedWithoutTokenOrTLS(t *testing.T) {
	cfg := apiserver.Config{Backend: &backendtest.Fake{}}
	want := "refusing to listen on TCP 127.0.0.1:"
	if err := apiserver.CheckTCP(cfg, "127.0.0.1:7070"); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--token-file") {
		t.Errorf("CheckTCP = %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = newServer(t, cfg).Serve(l)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Serve = %v, want a refusal", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("the refused listener still accepts")
	}
	if err := apiserver.CheckTCP(apiserver.Config{Token: "0123456789abcdef"}, "x"); err != nil {
		t.Errorf("CheckTCP with a token: %v", err)
	}
}

// TestTCPRefusedWithTLSAlone: TLS with a server certificate but neither
// required client certificates nor a token authenticates nobody: CheckTCP
// and Serve refuse it, saying what to add; client certificates, a token
// or tenants make it servable.
func TestTCPRefusedWithTLSAlone(t *testing.T) {
	pool, serverCert, _ := certs(t)
	alone := &tls.Config{Certificates: []tls.Certificate{serverCert}}
	want := "refusing to listen on TCP 127.0.0.1:7070 unauthenticated: --tls-cert needs --tls-client-ca (client certificates) or a token (--token-file or --tenants); TLS alone encrypts but lets anyone who can reach the port run commands in your sandboxes"
	if err := apiserver.CheckTCP(apiserver.Config{TLS: alone}, "127.0.0.1:7070"); err == nil || err.Error() != want {
		t.Errorf("CheckTCP = %v", err)
	}
	optional := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven}
	if err := apiserver.CheckTCP(apiserver.Config{TLS: optional}, "127.0.0.1:7070"); err == nil || err.Error() != want {
		t.Errorf("CheckTCP with optional client certificates = %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = newServer(t, apiserver.Config{Backend: &backendtest.Fake{}, TLS: alone}).Serve(l)
	if err == nil || !strings.HasPrefix(err.Error(), "refusing to listen on TCP "+l.Addr().String()+" unauthenticated") {
		t.Fatalf("Serve = %v, want a refusal", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("the refused listener still accepts")
	}
	required := &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
	reg, err := tenant.Parse(fmt.Appendf(nil, "[[tenant]]\nname = \"a\"\ntoken_sha256 = %q\n", tenant.HashToken("0123456789abcdef0123456789abcdef")))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]apiserver.Config{
		"client certificates": {TLS: required},
		"a token":             {TLS: alone, Token: "0123456789abcdef"},
		"tenants":             {TLS: alone, Tenants: reg},
	} {
		if err := apiserver.CheckTCP(cfg, "x"); err != nil {
			t.Errorf("CheckTCP with TLS and %s: %v", name, err)
		}
	}
}

func TestTCPToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	callers := make(chan string, 1)
	b := &backendtest.Fake{InfoFn: func(ctx context.Context) (api.Info, error) {
		callers <- api.CallerFrom(ctx).ID
		return api.Info{Version: "t", API: "v1", Sandboxes: map[string]int{}}, nil
	}}
	srv := newServer(t, apiserver.Config{Backend: b, Token: token})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, l)
	url := "http://" + l.Addr().String()
	for _, c := range []struct{ auth, code string }{
		{"", `missing token: send the token of the agentbox daemon's --token-file as "Authorization: Bearer TOKEN"`},
		{"Bearer wrong", "wrong token: "},
		{"Bearer " + token + "x", "wrong token: "},
		{"Basic " + token, "missing token: "},
	} {
		for _, target := range []string{"/v1/info", "/metrics", "/v1/openapi.yaml", "/v1/nope"} {
			req, _ := http.NewRequest("GET", url+target, nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			e := decodeError(t, resp)
			resp.Body.Close()
			if resp.StatusCode != 401 || e.Code != api.CodeUnauthorized || !strings.Contains(e.Message, c.code) ||
				resp.Header.Get("WWW-Authenticate") != `Bearer realm="agentbox"` {
				t.Errorf("%s with %q: %d %+v %q", target, c.auth, resp.StatusCode, e, resp.Header.Get("WWW-Authenticate"))
			}
		}
	}
	if calls := b.Calls(); len(calls) != 0 {
		t.Errorf("backend called without the token: %v", calls)
	}
	req, _ := http.NewRequest("GET", url+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
	if got := <-callers; got != "token" {
		t.Errorf("caller %q, want token", got)
	}
}

// certs makes a CA, a server certificate for 127.0.0.1 and a client
// certificate with CN "agent7".
func certs(t *testing.T) (pool *x509.CertPool, server, client tls.Certificate) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) tls.Certificate {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: k}
	}
	return pool, leaf(2, "server", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)}),
		leaf(3, "agent7", x509.ExtKeyUsageClientAuth, nil)
}

func TestTLSClientCertificateNamesTheCaller(t *testing.T) {
	pool, serverCert, clientCert := certs(t)
	callers := make(chan string, 1)
	b := &backendtest.Fake{InfoFn: func(ctx context.Context) (api.Info, error) {
		callers <- api.CallerFrom(ctx).ID
		return api.Info{Version: "t", API: "v1", Sandboxes: map[string]int{}}, nil
	}}
	srv := newServer(t, apiserver.Config{Backend: b, TLS: &tls.Config{
		Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, l)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}}}
	resp, err := hc.Get("https://" + l.Addr().String() + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := <-callers; got != "tls:agent7" {
		t.Errorf("caller %q, want tls:agent7", got)
	}
	// Without a token or tenants a bearer token is not checked at all
	// (an empty keyring requires none): the certificate still names the
	// caller.
	req, _ := http.NewRequest("GET", "https://"+l.Addr().String()+"/v1/info", nil)
	req.Header.Set("Authorization", "Bearer not-a-token-of-this-daemon")
	if resp, err = hc.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with a stray bearer token: status %d, want 200", resp.StatusCode)
	}
	if got := <-callers; got != "tls:agent7" {
		t.Errorf("with a stray bearer token: caller %q, want tls:agent7", got)
	}
	// Without a client certificate the handshake fails.
	hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if resp, err := hc.Get("https://" + l.Addr().String() + "/v1/info"); err == nil {
		resp.Body.Close()
		t.Error("a client without a certificate got an answer")
	}
	// Plain HTTP to the TLS port gets no API answer.
	if resp, err := http.Get("http://" + l.Addr().String() + "/v1/info"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP got an API answer")
		}
	}
}

func TestListenUnix(t *testing.T) {
	dir := shortTempDir(t)
	sock := filepath.Join(dir, "run", "a.sock")
	l, err := apiserver.ListenUnix(sock, 0, os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != os.Getgid() {
		t.Errorf("socket mode %v gid %d", fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid)
	}
	if pfi, err := os.Stat(filepath.Dir(sock)); err != nil || pfi.Mode().Perm() != 0o755 {
		t.Errorf("parent dir: %v %v", pfi.Mode(), err)
	}

	// A second daemon on the same socket is refused while the first answers.
	callers := make(chan string, 1)
	b := &backendtest.Fake{InfoFn: func(ctx context.Context) (api.Info, error) {
		callers <- api.CallerFrom(ctx).ID
		return api.Info{Version: "t", API: "v1", Sandboxes: map[string]int{}}, nil
	}}
	serve(t, newServer(t, apiserver.Config{Backend: b}), l)
	if _, err := apiserver.ListenUnix(sock, 0o600, -1); err == nil || !strings.Contains(err.Error(), "another agentbox serve is listening on "+sock+": stop it or pass --socket") {
		t.Errorf("second ListenUnix = %v", err)
	}

	// The unix socket needs no token; the caller is the peer's uid.
	resp, err := unixClient(sock).Get("http://x/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got, want := <-callers, fmt.Sprintf("uid:%d", os.Getuid()); got != want {
		t.Errorf("caller %q, want %q", got, want)
	}

	// A stale socket (nobody accepts) is replaced; a non-socket is not.
	stale := filepath.Join(dir, "stale.sock")
	sl, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	sl.SetUnlinkOnClose(false)
	sl.Close()
	l2, err := apiserver.ListenUnix(stale, 0o600, -1)
	if err != nil {
		t.Fatalf("ListenUnix over a stale socket: %v", err)
	}
	if fi, _ := os.Stat(stale); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode())
	}
	l2.Close()
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket file left after Close: %v", err)
	}
	plain := filepath.Join(dir, "plain")
	os.WriteFile(plain, nil, 0o644)
	if _, err := apiserver.ListenUnix(plain, 0, -1); err == nil || !strings.Contains(err.Error(), "is not a socket") {
		t.Errorf("ListenUnix on a file = %v", err)
	}
}

// TestOneServerUnixAndTCP: one Server serves a unix socket without token
// and a TCP port with it.
func TestOneServerUnixAndTCP(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv := newServer(t, apiserver.Config{Backend: &backendtest.Fake{}, Token: token})
	sock := filepath.Join(shortTempDir(t), "a.sock")
	ul, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, ul)
	serve(t, srv, tl)
	resp, err := unixClient(sock).Get("http://x/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("unix: %d", resp.StatusCode)
	}
	resp, err = http.Get("http://" + tl.Addr().String() + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("tcp without token: %d", resp.StatusCode)
	}
}

// TestShutdown: Shutdown stops accepting, ends event streams, waits for
// an exec in flight, and Serve returns nil.
func TestShutdown(t *testing.T) {
	execRunning := make(chan struct{})
	finishExec := make(chan struct{})
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		close(execRunning)
		<-finishExec
		stdout.Write([]byte("done"))
		return api.ExitStatus{ExitCode: 0, DurationMs: 1}, nil
	}}
	srv := newServer(t, apiserver.Config{Backend: b})
	sock := filepath.Join(shortTempDir(t), "a.sock")
	l, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	hc := unixClient(sock)

	events, err := hc.Get("http://x/v1/events")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()
	evDec := json.NewDecoder(events.Body)
	var ev api.Event
	if err := evDec.Decode(&ev); err != nil || ev.Type != api.EventSandboxState {
		t.Fatalf("first event %+v, %v", ev, err)
	}

	execResp, err := hc.Post("http://x/v1/sandboxes/w/exec", "application/json", strings.NewReader(`{"cmd":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer execResp.Body.Close()
	<-execRunning

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()

	// The event stream ends cleanly once Shutdown begins.
	if err := evDec.Decode(&ev); err != io.EOF {
		t.Errorf("event stream after Shutdown: %v, want EOF", err)
	}
	// Listeners are closed by then: nothing accepts on the socket.
	if c, err := net.Dial("unix", sock); err == nil {
		c.Close()
		t.Error("the socket still accepts after Shutdown began")
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned %v with an exec in flight", err)
	default:
	}
	close(finishExec)
	evs := readEvents(t, execResp.Body)
	if len(evs) != 3 || evs[2].Type != "exit" {
		t.Errorf("exec events after Shutdown %+v", evs)
	}
	if err := testenv.Receive(t, guard, "Shutdown", shut); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := testenv.Receive(t, guard, "Serve to return", served); err != nil {
		t.Errorf("Serve: %v", err)
	}
	// Serve after Shutdown (a goroutine that lost the race) serves nothing.
	l2, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(l2); err != nil {
		t.Errorf("Serve after Shutdown = %v, want nil", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Serve after Shutdown left its listener open: %v", err)
	}
}

// TestShutdownDeadline: when ctx ends first, Shutdown closes the
// connections (the backend's context ends) and returns ctx's error.
func TestShutdownDeadline(t *testing.T) {
	execRunning := make(chan struct{})
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		close(execRunning)
		<-ctx.Done()
		return api.ExitStatus{}, ctx.Err()
	}}
	srv := newServer(t, apiserver.Config{Backend: b})
	sock := filepath.Join(shortTempDir(t), "a.sock")
	l, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	resp, err := unixClient(sock).Post("http://x/v1/sandboxes/w/exec", "application/json", strings.NewReader(`{"cmd":["x"]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-execRunning
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled", err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the exec stream ended cleanly; want it cut")
	}
	if err := testenv.Receive(t, guard, "Serve to return", served); err != nil {
		t.Errorf("Serve: %v", err)
	}
}

// TestCutUploadIsAnError: an upload body that ends before its
// Content-Length reaches the backend as a 400 read error.
func TestCutUploadIsAnError(t *testing.T) {
	got := make(chan error, 1)
	b := &backendtest.Fake{UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
		_, err := io.Copy(io.Discard, r)
		got <- err
		return api.FileInfo{}, err
	}}
	srv := newServer(t, apiserver.Config{Backend: b})
	sock := filepath.Join(shortTempDir(t), "a.sock")
	l, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, l)
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "PUT /v1/sandboxes/w/files?path=/a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	c.(*net.UnixConn).CloseWrite()
	err = testenv.Receive(t, guard, "the upload to fail", got)
	var e *api.Error
	if !errors.As(err, &e) || e.Status != 400 || !strings.Contains(e.Message, "after 10 bytes") {
		t.Errorf("backend read error %v", err)
	}
	io.Copy(io.Discard, bufio.NewReader(c))
	c.Close()
}

func TestActivationListenersWithoutSystemd(t *testing.T) {
	t.Setenv("LISTEN_PID", "")
	t.Setenv("LISTEN_FDS", "")
	ls, err := apiserver.ActivationListeners()
	if err != nil || ls != nil {
		t.Errorf("ActivationListeners() = %v, %v; want nil, nil", ls, err)
	}
}

func TestModes(t *testing.T) {
	for _, c := range []struct {
		in   string
		mode fs.FileMode
		out  string
	}{
		{"644", 0o644, "0644"},
		{"0644", 0o644, "0644"},
		{"0", 0, "0000"},
		{"01777", 0o777 | fs.ModeSticky, "1777"},
		{"4755", 0o755 | fs.ModeSetuid, "4755"},
		{"02750", 0o750 | fs.ModeSetgid, "2750"},
		{"07777", 0o777 | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky, "7777"},
	} {
		m, err := api.ParseMode(c.in)
		if err != nil || m != c.mode || api.FormatMode(m) != c.out {
			t.Errorf("ParseMode(%q) = %v, %v; FormatMode = %q; want %v, %q", c.in, m, err, api.FormatMode(m), c.mode, c.out)
		}
	}
	if got := api.FormatMode(0o4755); got != "4755" {
		t.Errorf("FormatMode(0o4755) = %q, want 4755 (unix-style bits)", got)
	}
	for _, bad := range []string{"", "8", "0999", "10000", "077777", "-1", "+644", "rw", "0x1ff", " 644"} {
		if _, err := api.ParseMode(bad); err == nil {
			t.Errorf("ParseMode(%q) succeeded", bad)
		}
	}
}

func TestCleanGuestPath(t *testing.T) {
	for in, want := range map[string]string{"/": "/", "/a/b": "/a/b", "/a//b/": "/a/b", "/a/./b": "/a/b", "/.hidden": "/.hidden", "/a..b": "/a..b"} {
		if got, err := api.CleanGuestPath("path", in); err != nil || got != want {
			t.Errorf("CleanGuestPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a", "./a", "/..", "/a/../b", "/a/..", "/a\x00", "/" + strings.Repeat("a", 4096)} {
		if _, err := api.CleanGuestPath("path", bad); err == nil {
			t.Errorf("CleanGuestPath(%q) succeeded", bad)
		}
	}
}

func TestRefsAndNames(t *testing.T) {
	for _, ok := range []string{"a", "0123456789ab", "work-1.a_b", strings.Repeat("a", 63)} {
		if !api.ValidRef(ok) {
			t.Errorf("ValidRef(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "..", ".a", "-a", "_a", "a/b", "a b", strings.Repeat("a", 64), "%2e%2e", "é"} {
		if api.ValidRef(bad) {
			t.Errorf("ValidRef(%q) = true", bad)
		}
	}
	if api.ValidName("0123456789ab") || !api.ValidName("0123456789abc") || !api.ValidName("0123456789AB") {
		t.Error("ValidName and IDs")
	}
	if !api.ValidID("0123456789ab") || api.ValidID("0123456789AB") {
		t.Error("ValidID")
	}
}
