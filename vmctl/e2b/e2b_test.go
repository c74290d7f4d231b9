package e2b_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// call sends a request to the front and returns the status, headers and
// body; key is the X-API-KEY ("" none).
func call(t *testing.T, base, method, path, key, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("X-API-KEY", key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// e2bErr is E2B's error body.
type e2bErr struct {
	Code      int    `json:"code"`
	ErrorCode string `json:"error_code"`
	Message   string `json:"message"`
}

// wantErr checks an error answer: status, the same code in the body, and
// a message containing msg.
func wantErr(t *testing.T, what string, status int, body string, wantStatus int, msg string) {
	t.Helper()
	var e e2bErr
	if err := json.Unmarshal([]byte(body), &e); err != nil || status != wantStatus || e.Code != wantStatus || !strings.Contains(e.Message, msg) {
		t.Fatalf("%s: %d %s; want %d {code:%d, message containing %q}", what, status, body, wantStatus, wantStatus, msg)
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func TestCreate(t *testing.T) {
	var st store
	srv, key := front(t, st.backend(), nil)
	status, _, body := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, `{"templateID":"python","timeout":60,
		"metadata":{"team":"a","userId":"u1"},"envVars":{"B":"2","A":"1"},"network":{"allowOut":["example.com","1.1.1.1:53"],"denyOut":["0.0.0.0/0"]},
		"autoPause":true,"secure":true,"somethingNew":1}`)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	var got struct {
		SandboxID, TemplateID, ClientID, EnvdVersion, EnvdAccessToken string
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if got.SandboxID != "000000000001" || got.TemplateID != "python" || got.ClientID != "agentbox" || got.EnvdVersion != e2b.EnvdVersion ||
		got.EnvdAccessToken != e2b.AccessToken(key, "000000000001") || !hex64.MatchString(got.EnvdAccessToken) {
		t.Fatalf("create answered %s", body)
	}
	want := api.CreateSandboxRequest{
		Template: "python", Labels: map[string]string{"team": "a", "userId": "u1"}, Env: []string{"A=1", "B=2"},
		Limits:  api.Limits{TTLSeconds: 60, TTLAction: api.IdleActionPauseToDisk},
		Network: &api.NetworkPolicy{Mode: "allowlist", Allow: []string{"example.com", "1.1.1.1:53"}},
	}
	if len(st.created) != 1 || !reflect.DeepEqual(st.created[0], want) {
		t.Fatalf("the service got %+v, want %+v", st.created, want)
	}
	if st.timeout["000000000001"] != 60 {
		t.Fatalf("the timeout was not set from the answer: %v", st.timeout)
	}
	for _, c := range st.callers {
		if c != e2b.Caller {
			t.Fatalf("callers %q, want all %q", st.callers, e2b.Caller)
		}
	}

	// Defaults: template base, timeout 300 s, the template's network,
	// kill on timeout; autoPause without memory stops.
	st.created = nil
	if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes", testKey, `{"autoPause":true,"autoPauseMemory":false,"allow_internet_access":true}`); status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, body)
	}
	want = api.CreateSandboxRequest{Template: "base", Limits: api.Limits{TTLSeconds: 300, TTLAction: api.IdleActionStop}, Network: &api.NetworkPolicy{Mode: "open"}}
	if !reflect.DeepEqual(st.created[0], want) {
		t.Fatalf("the service got %+v, want %+v", st.created[0], want)
	}
	st.created = nil
	if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes", testKey, ``); status != http.StatusCreated {
		t.Fatalf("create with no body: %d %s", status, body)
	}
	if want = (api.CreateSandboxRequest{Template: "base", Limits: api.Limits{TTLSeconds: 300}}); !reflect.DeepEqual(st.created[0], want) {
		t.Fatalf("the service got %+v, want %+v", st.created[0], want)
	}
}

// TestCreateTemplate: templateID names one of the daemon's templates, the
// answers show it, and a front made with Warm asks every create for a
// warm start.
func TestCreateTemplate(t *testing.T) {
	var st store
	srv, _ := frontWith(t, st.backend(), nil, e2b.Config{Warm: true})
	status, _, body := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, `{"templateID":"python"}`)
	if status != http.StatusCreated || !strings.Contains(body, `"templateID":"python"`) {
		t.Fatalf("create: %d %s", status, body)
	}
	if want := (api.CreateSandboxRequest{Template: "python", Warm: true, Limits: api.Limits{TTLSeconds: 300}}); len(st.created) != 1 || !reflect.DeepEqual(st.created[0], want) {
		t.Fatalf("the service got %+v, want %+v", st.created, want)
	}
	status, _, body = call(t, srv.URL, "GET", "/sandboxes/000000000001", testKey, "")
	if status != http.StatusOK || !strings.Contains(body, `"templateID":"python"`) {
		t.Fatalf("get: %d %s", status, body)
	}
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes?template=python", testKey, "")
	if status != http.StatusOK || !strings.Contains(body, `"sandboxID":"000000000001"`) {
		t.Fatalf("list by template: %d %s", status, body)
	}

	// A template the daemon does not serve: the service's 404
	// template_not_found, in E2B's shape, with its message.
	status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes", testKey, `{"templateID":"node"}`)
	wantErr(t, "unknown template", status, body, 404, `template "node" not found: this daemon serves base, python`)
	if !strings.Contains(body, `"error_code":"template_not_found"`) {
		t.Fatalf("unknown template: %s, want error_code template_not_found", body)
	}
	if len(st.boxes) != 1 {
		t.Fatalf("sandboxes after the refused create: %v", st.boxes)
	}
}

// TestCreateNoTemplates: on a daemon that serves no templates, the
// service's template_not_found says what an E2B user can do (start the
// daemon with a base template), not the REST API's "give an image
// directory", which E2B's create cannot.
func TestCreateNoTemplates(t *testing.T) {
	var st store
	b := st.backend()
	b.CreateSandboxFn = func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
		// As the daemon answers it (daemon.ErrTemplateNotFound).
		return api.Sandbox{}, errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound,
			fmt.Sprintf("template %q not found: this daemon serves no templates (start it with `agentbox serve --template NAME=DIR|PROFILE`), or give an image directory instead", req.Template))
	}
	b.Templates.ListFn = func(context.Context) ([]api.Template, error) { return nil, nil }
	srv, _ := front(t, b, nil)
	status, _, body := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, `{}`)
	wantErr(t, "no templates", status, body, 404,
		"template \"base\" not found: this daemon serves no templates: start it with `agentbox serve --template base=DIR` (an image directory, or base=PROFILE)")
	if strings.Contains(body, "image directory instead") || !strings.Contains(body, `"error_code":"template_not_found"`) {
		t.Fatalf("no templates: %s", body)
	}
}

// TestCreateRefused: options agentbox cannot honour are 400 (404 for an
// unknown template) in E2B's shape, naming the option, and nothing is
// created.
func TestCreateRefused(t *testing.T) {
	var st store
	srv, _ := front(t, st.backend(), nil)
	for _, c := range []struct {
		body   string
		status int
		msg    string
	}{
		{`{"templateID":"team/node:v2"}`, 404, `template "team/node:v2" not found: agentbox templates are named by 1 to 63 letters, digits, '_', '.', '-'; this daemon serves base, python`},
		{`{"mcp":{"x":{}}}`, 400, "mcp (E2B's MCP gateway template) is not supported by agentbox"},
		{`{"iam":{"tokens":{"aws":{"audience":"a","tokenType":"JWT-SVID"}}}}`, 400, "iam (workload identity tokens) is not supported by agentbox"},
		{`{"volumeMounts":[{"name":"v","path":"/v"}]}`, 400, "volumeMounts is not supported by agentbox"},
		{`{"autoPause":true,"autoResume":{"enabled":true}}`, 400, "autoResume (traffic resuming a paused sandbox): resume it with Sandbox.connect is not supported"},
		{`{"network":{"denyOut":["8.8.8.8"]}}`, 400, `network.denyOut "8.8.8.8"`},
		{`{"network":{"allowOut":["a.com"],"rules":{"a.com":[{}]}}}`, 400, "network.rules (request transforms) is not supported"},
		{`{"network":{"egressProxy":{"address":"p:1080"}}}`, 400, "network.egressProxy is not supported"},
		{`{"metadata":{"has space":"x"}}`, 400, `metadata key "has space": agentbox keeps metadata as labels`},
		{`{"envVars":{"A=B":"x"}}`, 400, `envVars key "A=B"`},
		{`{"timeout":0}`, 400, "timeout 0: want 1 to"},
		{`{"timeout":"1"}`, 400, "not the JSON the E2B API takes"},
	} {
		status, _, body := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, c.body)
		wantErr(t, c.body, status, body, c.status, c.msg)
	}
	if len(st.created) != 0 {
		t.Fatalf("refused creates reached the service: %+v", st.created)
	}
}

// TestNetworkPolicy pins the map from E2B's egress options to agentbox's
// policy.
func TestNetworkPolicy(t *testing.T) {
	var st store
	srv, _ := front(t, st.backend(), nil)
	for body, want := range map[string]*api.NetworkPolicy{
		`{}`:                                    nil,
		`{"allow_internet_access":true}`:        {Mode: "open"},
		`{"allow_internet_access":false}`:       {Mode: "none"},
		`{"network":{"denyOut":["0.0.0.0/0"]}}`: {Mode: "none"},
		`{"network":{"allowOut":["0.0.0.0/0"],"denyOut":["0.0.0.0/0"]}}`:                    {Mode: "open"},
		`{"allow_internet_access":false,"network":{"allowOut":["a.com"]}}`:                  {Mode: "allowlist", Allow: []string{"a.com"}},
		`{"network":{"allowPublicTraffic":false,"maskRequestHost":"x","httpsPorts":[443]}}`: nil,
	} {
		st.created = nil
		if status, _, answer := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, body); status != http.StatusCreated {
			t.Fatalf("%s: %d %s", body, status, answer)
		}
		if got := st.created[0].Network; !reflect.DeepEqual(got, want) {
			t.Errorf("%s: network %+v, want %+v", body, got, want)
		}
	}
}

func TestAuth(t *testing.T) {
	var st store
	srv, key := front(t, st.backend(), nil)
	st.add("00000000000a", api.StateRunning, nil, backendtest.Epoch)
	status, _, body := call(t, srv.URL, "GET", "/sandboxes/00000000000a", "", "")
	wantErr(t, "no key", status, body, 401, "missing token: send the token of the agentbox daemon's --token-file as E2B_API_KEY (the X-API-KEY header)")
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes", "wrong", "")
	wantErr(t, "wrong key", status, body, 401, "wrong token: ")
	status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000a/fork", "", "")
	wantErr(t, "no key, unsupported route", status, body, 401, "missing token: ")
	if len(st.callers) != 0 {
		t.Fatalf("unauthenticated requests reached the service: %v", st.callers)
	}

	// The data plane: the sandbox's own token, nothing else (no API key
	// needed: the SDK sends none there).
	data := func(id, tok string) (int, string) {
		status, _, body := call(t, srv.URL, "GET", "/health", "", "", "E2b-Sandbox-Id", id, "E2b-Sandbox-Port", "49983", "X-Access-Token", tok)
		return status, body
	}
	status, body = data("00000000000a", "")
	wantErr(t, "no token", status, body, 401, "missing X-Access-Token: send the envdAccessToken create or connect returned")
	status, body = data("00000000000a", e2b.AccessToken(key, "00000000000b"))
	wantErr(t, "another sandbox's token", status, body, 401, "wrong X-Access-Token for sandbox 00000000000a")
	status, body = data("00000000000c", "x")
	wantErr(t, "unknown sandbox, wrong token", status, body, 401, "wrong X-Access-Token")
	if status, body = data("00000000000a", e2b.AccessToken(key, "00000000000a")); status != 200 || body != "envd for 00000000000a as e2b" {
		t.Fatalf("data plane with the token: %d %q", status, body)
	}
}

func TestDataPlaneState(t *testing.T) {
	var st store
	srv, key := front(t, st.backend(), nil)
	st.add("00000000000a", api.StatePaused, nil, backendtest.Epoch)
	st.add("00000000000f", api.StateFailed, nil, backendtest.Epoch)
	run := st.add("00000000000b", api.StateRunning, nil, backendtest.Epoch)
	st.mu.Lock()
	run.Name = "work2"
	st.boxes[run.ID] = run
	st.mu.Unlock()
	data := func(id, tok string, hdr ...string) (int, string) {
		status, _, body := call(t, srv.URL, "POST", "/process.Process/List", "", "{}", append([]string{"E2b-Sandbox-Id", id, "X-Access-Token", tok}, hdr...)...)
		return status, body
	}
	status, body := data("00000000000a", e2b.AccessToken(key, "00000000000a"))
	wantErr(t, "paused", status, body, 502, "sandbox 00000000000a is paused: Sandbox.connect resumes it")
	status, body = data("00000000000f", e2b.AccessToken(key, "00000000000f"))
	wantErr(t, "failed", status, body, 502, "sandbox 00000000000f is failed")
	status, body = data("00000000000c", e2b.AccessToken(key, "00000000000c"))
	wantErr(t, "unknown", status, body, 502, "sandbox 00000000000c not found")
	status, body = data("00000000000b", e2b.AccessToken(key, "00000000000b"), "E2b-Sandbox-Port", "8080")
	wantErr(t, "other port", status, body, 404, "agentbox's E2B front serves only envd (port 49983)")
	// A name (Sandbox.connect("work2") sends it as the ID) finds the
	// sandbox; its token is its ID's.
	if status, body = data("work2", e2b.AccessToken(key, "00000000000b")); status != 200 || body != "envd for 00000000000b as e2b" {
		t.Fatalf("by name: %d %q", status, body)
	}
}

// TestErrors: the service's errors reach the SDK through the one error
// table, with the HTTP status as E2B's code and agentbox's code as
// error_code; 429 carries Retry-After.
func TestErrors(t *testing.T) {
	var st store
	b := st.backend()
	srv, _ := front(t, b, nil)
	b.CreateSandboxFn = func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
		return api.Sandbox{}, errdefs.WithDetails(errdefs.New(errdefs.ErrResourceExhausted, api.CodeCapacity, "capacity").WithMessage("not enough memory"), map[string]any{"x": 1})
	}
	status, hdr, body := call(t, srv.URL, "POST", "/v2/sandboxes", testKey, "{}")
	wantErr(t, "capacity", status, body, 429, "not enough memory")
	if hdr.Get("Retry-After") != "1" || !strings.Contains(body, `"error_code":"capacity_exceeded"`) {
		t.Fatalf("429: Retry-After %q, body %s", hdr.Get("Retry-After"), body)
	}
	b.CreateSandboxFn = func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
		return api.Sandbox{}, errdefs.ErrUnavailable.WithMessage("libvirt is down")
	}
	status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes", testKey, "{}")
	wantErr(t, "unavailable", status, body, 503, "libvirt is down")
	status, _, body = call(t, srv.URL, "GET", "/sandboxes/00000000000c", testKey, "")
	wantErr(t, "get unknown", status, body, 404, "sandbox 00000000000c not found")
	status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000c/fork", testKey, "{}")
	wantErr(t, "fork", status, body, 501, "POST /sandboxes/00000000000c/fork is not supported by agentbox's E2B API")
}

func TestGetAndKill(t *testing.T) {
	var st store
	srv, key := front(t, st.backend(), nil)
	st.add("00000000000a", api.StateRunning, map[string]string{"k": "v"}, backendtest.Epoch)
	st.add("00000000000f", api.StateFailed, nil, backendtest.Epoch)
	status, _, body := call(t, srv.URL, "GET", "/sandboxes/00000000000a", testKey, "")
	want := `{"sandboxID":"00000000000a","templateID":"debian","clientID":"agentbox","startedAt":"2025-01-02T03:04:05.0000006Z","endAt":"9999-12-31T23:59:59Z","cpuCount":2,"memoryMB":512,"diskSizeMB":0,"state":"running","envdVersion":"0.5.7","metadata":{"k":"v"},"envdAccessToken":"` +
		e2b.AccessToken(key, "00000000000a") + `","lifecycle":{"onTimeout":"kill","autoResume":false}}` + "\n"
	if status != 200 || body != want {
		t.Fatalf("get: %d\n got %s\nwant %s", status, body, want)
	}
	status, _, body = call(t, srv.URL, "GET", "/sandboxes/00000000000f", testKey, "")
	wantErr(t, "get failed", status, body, 404, "sandbox 00000000000f failed")
	if status, _, body = call(t, srv.URL, "DELETE", "/sandboxes/00000000000f", testKey, ""); status != 204 {
		t.Fatalf("kill failed sandbox: %d %s", status, body)
	}
	if status, _, body = call(t, srv.URL, "DELETE", "/sandboxes/00000000000a", testKey, ""); status != 204 || body != "" {
		t.Fatalf("kill: %d %s", status, body)
	}
	status, _, body = call(t, srv.URL, "DELETE", "/sandboxes/00000000000a", testKey, "")
	wantErr(t, "kill again", status, body, 404, "not found")
	if len(st.boxes) != 0 {
		t.Fatalf("left: %v", st.boxes)
	}
}

func TestTimeoutPauseConnect(t *testing.T) {
	var st store
	srv, _ := front(t, st.backend(), nil)
	st.add("00000000000a", api.StateRunning, nil, backendtest.Epoch)
	if status, _, body := call(t, srv.URL, "POST", "/sandboxes/00000000000a/timeout", testKey, `{"timeout":30}`); status != 204 || st.timeout["00000000000a"] != 30 {
		t.Fatalf("timeout: %d %s (%v)", status, body, st.timeout)
	}
	status, _, body := call(t, srv.URL, "POST", "/sandboxes/00000000000a/timeout", testKey, `{}`)
	wantErr(t, "timeout without one", status, body, 400, "timeout: want 1 to")

	// connect to a running sandbox: 200; the timeout only ever extends.
	if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000a/connect", testKey, `{"timeout":10}`); status != 200 || st.timeout["00000000000a"] != 30 {
		t.Fatalf("connect running, shorter: %d %s (%v)", status, body, st.timeout)
	}
	if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000a/connect", testKey, `{"timeout":600}`); status != 200 || st.timeout["00000000000a"] != 600 {
		t.Fatalf("connect running, longer: %d %s (%v)", status, body, st.timeout)
	}

	// pause: to disk, the TTL ended; again: 409.
	if status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000a/pause", testKey, `{}`); status != 204 {
		t.Fatalf("pause: %d %s", status, body)
	}
	if want := []api.PauseRequest{{ToDisk: true, EndTTL: true}}; !reflect.DeepEqual(st.pauses, want) {
		t.Fatalf("pauses %+v, want %+v", st.pauses, want)
	}
	status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000a/pause", testKey, `{"memory":true}`)
	wantErr(t, "pause again", status, body, 409, "sandbox 00000000000a is already paused")

	// connect resumes a paused one (201) with the default timeout.
	delete(st.timeout, "00000000000a")
	status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000a/connect", testKey, `{}`)
	if status != 201 || st.boxes["00000000000a"].State != api.StateRunning || st.timeout["00000000000a"] != 300 || !strings.Contains(body, `"sandboxID":"00000000000a"`) {
		t.Fatalf("connect paused: %d %s (%v)", status, body, st.timeout)
	}

	// create with a timeout, pause (which ends the TTL), connect naming
	// none: resumed with the default timeout, as E2B does, not without
	// any TTL.
	delete(st.timeout, "00000000000a")
	if status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000a/timeout", testKey, `{"timeout":60}`); status != 204 {
		t.Fatalf("timeout: %d %s", status, body)
	}
	if status, _, body = call(t, srv.URL, "POST", "/sandboxes/00000000000a/pause", testKey, `{}`); status != 204 || st.boxes["00000000000a"].ExpiresAt != nil {
		t.Fatalf("pause: %d %s", status, body)
	}
	delete(st.timeout, "00000000000a")
	status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000a/connect", testKey, ``)
	if status != 201 || st.timeout["00000000000a"] != 300 || strings.Contains(body, "9999-") {
		t.Fatalf("connect paused after pause ended its TTL: %d %s (%v)", status, body, st.timeout)
	}

	// A stopped sandbox (autoPause without memory) boots again: 201, with
	// the default timeout even when it had no TTL (one made by agentbox
	// create without --ttl).
	st.add("00000000000b", api.StateStopped, nil, backendtest.Epoch)
	if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000b/connect", testKey, ``); status != 201 || st.boxes["00000000000b"].State != api.StateRunning {
		t.Fatalf("connect stopped: %d %s", status, body)
	}
	if got := st.timeout["00000000000b"]; got != 300 {
		t.Fatalf("a booted sandbox without TTL: timeout %d, want 300 (%v)", got, st.timeout)
	}
	// A running sandbox without a TTL keeps none (its timeout is never
	// shortened), whether or not connect names one.
	st.add("00000000000d", api.StateRunning, nil, backendtest.Epoch)
	for _, req := range []string{`{}`, `{"timeout":45}`} {
		if status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000d/connect", testKey, req); status != 200 || !strings.Contains(body, `"sandboxID":"00000000000d"`) {
			t.Fatalf("connect running without TTL %s: %d %s", req, status, body)
		}
		if _, ok := st.timeout["00000000000d"]; ok {
			t.Fatalf("connect %s: a running sandbox without TTL got one: %v", req, st.timeout)
		}
	}
	status, _, body = call(t, srv.URL, "POST", "/v2/sandboxes/00000000000c/connect", testKey, `{}`)
	wantErr(t, "connect unknown", status, body, 404, "not found")
}

func TestList(t *testing.T) {
	var st store
	srv, _ := front(t, st.backend(), nil)
	for i, id := range []string{"00000000000a", "00000000000b", "00000000000c", "00000000000d"} {
		st.add(id, api.StateRunning, map[string]string{"team": "a", "n": id}, backendtest.Epoch.Add(time.Duration(i)*time.Minute))
	}
	st.add("00000000000e", api.StatePaused, map[string]string{"team": "a"}, backendtest.Epoch.Add(time.Hour))
	st.add("00000000000f", api.StateFailed, map[string]string{"team": "a"}, backendtest.Epoch.Add(time.Hour))
	st.add("000000000010", api.StateRunning, map[string]string{"team": "b"}, backendtest.Epoch.Add(time.Hour))
	ids := func(body string) []string {
		var l []struct{ SandboxID, State string }
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
		out := []string{}
		for _, s := range l {
			out = append(out, s.SandboxID[10:]+":"+s.State)
		}
		return out
	}
	// The SDK's encoding: encodeURIComponent on each, then URLSearchParams.
	md := "metadata=team%3Da"
	status, hdr, body := call(t, srv.URL, "GET", "/v2/sandboxes?"+md+"&limit=2", testKey, "")
	if got := ids(body); status != 200 || !slices.Equal(got, []string{"0e:paused", "0d:running"}) || hdr.Get("X-Next-Token") == "" {
		t.Fatalf("page 1: %d %v next %q", status, got, hdr.Get("X-Next-Token"))
	}
	status, hdr, body = call(t, srv.URL, "GET", "/v2/sandboxes?"+md+"&limit=2&nextToken="+hdr.Get("X-Next-Token"), testKey, "")
	if got := ids(body); status != 200 || !slices.Equal(got, []string{"0c:running", "0b:running"}) || hdr.Get("X-Next-Token") == "" {
		t.Fatalf("page 2: %d %v", status, got)
	}
	status, hdr, body = call(t, srv.URL, "GET", "/v2/sandboxes?"+md+"&limit=2&nextToken="+hdr.Get("X-Next-Token"), testKey, "")
	if got := ids(body); status != 200 || !slices.Equal(got, []string{"0a:running"}) || hdr.Get("X-Next-Token") != "" {
		t.Fatalf("page 3: %d %v next %q", status, got, hdr.Get("X-Next-Token"))
	}
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes?state=paused&order=asc", testKey, "")
	if got := ids(body); status != 200 || !slices.Equal(got, []string{"0e:paused"}) {
		t.Fatalf("paused: %d %v", status, got)
	}
	// A key and value with characters URL-encoded twice.
	st.add("000000000011", api.StateRunning, map[string]string{"a/b": "x y&z"}, backendtest.Epoch)
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes?metadata=a%252Fb%3Dx%2520y%2526z", testKey, "")
	if got := ids(body); status != 200 || !slices.Equal(got, []string{"11:running"}) {
		t.Fatalf("encoded metadata: %d %v (%s)", status, got, body)
	}
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes?state=gone", testKey, "")
	wantErr(t, "bad state", status, body, 400, `state "gone": want running, paused`)
	status, _, body = call(t, srv.URL, "GET", "/v2/sandboxes?nextToken=zz", testKey, "")
	wantErr(t, "bad token", status, body, 400, "nextToken")
}

func TestLoadAccessKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := e2b.LoadAccessKey(dir)
	if err != nil || len(k1) != 32 {
		t.Fatalf("LoadAccessKey = %d bytes, %v", len(k1), err)
	}
	fi, err := os.Stat(filepath.Join(dir, e2b.AccessKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if k2, err := e2b.LoadAccessKey(dir); err != nil || string(k2) != string(k1) {
		t.Fatal("a second load made another key")
	}
	os.WriteFile(filepath.Join(dir, e2b.AccessKeyFile), []byte("short"), 0o600)
	if _, err := e2b.LoadAccessKey(dir); err == nil || !strings.Contains(err.Error(), "holds 5 bytes, want 32: remove it") {
		t.Fatalf("short key: %v", err)
	}
}
