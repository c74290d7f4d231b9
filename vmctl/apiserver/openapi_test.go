package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// loadDoc loads and validates the embedded OpenAPI document.
func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
	if err != nil {
		t.Fatalf("loading openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIRoutesMatchServer: the document's operations are exactly the
// server's routes, with the same query and path parameters.
func TestOpenAPIRoutesMatchServer(t *testing.T) {
	doc := loadDoc(t)
	type opKey struct{ method, path string }
	inDoc := map[opKey][2][]string{} // query params, path params
	for p, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			var query, path []string
			for _, ps := range []openapi3.Parameters{item.Parameters, op.Parameters} {
				for _, pr := range ps {
					switch pr.Value.In {
					case "query":
						query = append(query, pr.Value.Name)
					case "path":
						path = append(path, pr.Value.Name)
					}
				}
			}
			slices.Sort(query)
			slices.Sort(path)
			inDoc[opKey{method, p}] = [2][]string{query, path}
		}
	}
	seen := map[opKey]bool{}
	for _, rt := range apiserver.Routes() {
		k := opKey{rt.Method, rt.Path}
		if seen[k] {
			t.Errorf("route %s %s is registered twice", rt.Method, rt.Path)
		}
		seen[k] = true
		params, ok := inDoc[k]
		if !ok {
			t.Errorf("route %s %s is not in openapi.yaml", rt.Method, rt.Path)
			continue
		}
		query := slices.Clone(rt.Query)
		slices.Sort(query)
		if !slices.Equal(query, params[0]) {
			t.Errorf("%s %s: query parameters: server takes %v, openapi.yaml says %v", rt.Method, rt.Path, query, params[0])
		}
		var pathParams []string
		for _, seg := range strings.Split(rt.Path, "/") {
			if strings.HasPrefix(seg, "{") {
				pathParams = append(pathParams, strings.Trim(seg, "{}"))
			}
		}
		slices.Sort(pathParams)
		if !slices.Equal(pathParams, params[1]) {
			t.Errorf("%s %s: path parameters: server has %v, openapi.yaml says %v", rt.Method, rt.Path, pathParams, params[1])
		}
	}
	for k := range inDoc {
		if !seen[k] {
			t.Errorf("openapi.yaml describes %s %s, which the server does not serve", k.method, k.path)
		}
	}
}

// apiCase is one request driven through the handler and checked against
// the document.
type apiCase struct {
	name   string
	method string
	target string // path and query
	ct     string // Content-Type; "json" is application/json
	body   string
	setup  func(b *backendtest.Fake)
	status int
	code   string // error code, for error answers
	// called says the Backend must have been called (else it must not).
	called bool
	// offDoc says the request is deliberately outside the document (an
	// invalid parameter or body): only the answer is validated.
	offDoc bool
	// check inspects the answer further.
	check func(t *testing.T, rec *httptest.ResponseRecorder)
	// router, if set, is the server's cluster Router (with a keyring
	// holding a peers' token).
	router apiserver.Router
}

const sb = "/v1/sandboxes/" + backendtest.SandboxID

// successCases answer 2xx and cover every route.
func successCases() []apiCase {
	return append(append(append(append(append(append(append(append(nodeSuccessCases(), templateSuccessCases()...), snapshotSuccessCases()...), portSuccessCases()...), forkSuccessCases()...), lifecycleSuccessCases()...), watchSuccessCases()...), attachSuccessCases()...), []apiCase{
		{name: "info", method: "GET", target: "/v1/info", status: 200, called: true},
		{name: "openapi", method: "GET", target: "/v1/openapi.yaml", status: 200, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			if !bytes.Equal(rec.Body.Bytes(), api.OpenAPI()) {
				t.Error("GET /v1/openapi.yaml is not the embedded document")
			}
		}},
		{name: "metrics", method: "GET", target: "/metrics", status: 200},
		{name: "events", method: "GET", target: "/v1/events", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.EventsFn = func(ctx context.Context, emit func(api.Event) error) error {
				emit(api.Event{Time: backendtest.Epoch, Type: api.EventSandboxCreated, Sandbox: backendtest.SandboxID})
				return emit(api.Event{Time: backendtest.Epoch, Type: api.EventSandboxRemoved, Sandbox: backendtest.SandboxID, Name: "w"})
			}
		}, check: lines(2)},
		{name: "audit all", method: "GET", target: "/v1/audit", status: 200, called: true, check: lines(1)},
		{name: "audit empty", method: "GET", target: "/v1/audit", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.AuditFn = func(context.Context, string, func(audit.Entry) error) error { return nil }
		}, check: lines(0)},
		{name: "create", method: "POST", target: "/v1/sandboxes", ct: "json", status: 201, called: true,
			body:  `{"image":"/images/debian","name":"work1","vcpus":2,"memory_mib":512,"accel":"tcg","boot_timeout_ms":60000,"labels":{"team":"a","x.io/k":"v"},"limits":{"ttl_seconds":60,"idle_timeout_seconds":30,"exec_timeout_ms":1000,"max_execs":5}}`,
			check: header("Location", sb)},
		{name: "create minimal", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"}`, status: 201, called: true},
		{name: "list", method: "GET", target: "/v1/sandboxes?label=team%3Da&label=x%3D&state=running", status: 200, called: true},
		{name: "list empty", method: "GET", target: "/v1/sandboxes", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.ListSandboxesFn = func(context.Context, map[string]string, string) ([]api.Sandbox, error) { return nil, nil }
		}, check: bodyIs(`{"sandboxes":[]}` + "\n")},
		{name: "get by id", method: "GET", target: sb, status: 200, called: true},
		{name: "get by name", method: "GET", target: "/v1/sandboxes/work-1.a_b", status: 200, called: true},
		{name: "delete", method: "DELETE", target: sb + "?force=true", status: 204, called: true},
		{name: "stop", method: "POST", target: sb + "/stop", status: 200, called: true},
		{name: "console", method: "GET", target: sb + "/console?tail=100", status: 200, called: true, check: bodyIs("booted\n")},
		{name: "console empty", method: "GET", target: sb + "/console", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.ConsoleFn = func(context.Context, string, int64, io.Writer) error { return nil }
		}, check: bodyIs("")},
		{name: "sandbox audit", method: "GET", target: sb + "/audit", status: 200, called: true, check: lines(1)},
		{name: "exec", method: "POST", target: sb + "/exec", ct: "json", status: 200, called: true,
			body:  `{"cmd":["sh","-c","echo hi"],"env":["A=1","B="],"cwd":"/work","uid":1000,"gid":1000,"timeout_ms":5000,"stdin":"aGVsbG8="}`,
			check: lines(4)},
		{name: "exec missing content type", method: "POST", target: sb + "/exec", body: `{"cmd":["true"]}`, status: 200, called: true, offDoc: true},
		{name: "exec content type with charset", method: "POST", target: sb + "/exec", ct: "application/json; charset=utf-8", body: `{"cmd":["true"]}`, status: 200, called: true},
		{name: "start process", method: "POST", target: sb + "/processes", ct: "json", body: `{"cmd":["sleep","10"],"stdin_open":true}`, status: 201, called: true,
			check: header("Location", sb+"/processes/p1")},
		{name: "list processes", method: "GET", target: sb + "/processes", status: 200, called: true},
		{name: "exec history", method: "GET", target: sb + "/execs?limit=5", status: 200, called: true},
		{name: "exec history bad limit", method: "GET", target: sb + "/execs?limit=-1", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "get process", method: "GET", target: sb + "/processes/p1", status: 200, called: true},
		{name: "process output", method: "GET", target: sb + "/processes/p1/output?offset=10&follow=true", status: 200, called: true, check: lines(2)},
		{name: "process output running", method: "GET", target: sb + "/processes/p1/output", status: 200, called: true, setup: func(b *backendtest.Fake) {
			b.ProcessOutputFn = func(context.Context, string, string, int64, bool, func(api.ExecEvent) error) error { return nil }
		}, check: lines(0)},
		{name: "stdin", method: "POST", target: sb + "/processes/p1/stdin?close=true", ct: "application/octet-stream", body: "abc\x00def", status: 200, called: true,
			check: bodyIs(`{"bytes":7}` + "\n")},
		{name: "kill", method: "POST", target: sb + "/processes/p1/kill", ct: "json", body: `{"signal":"TERM"}`, status: 204, called: true},
		{name: "kill default", method: "POST", target: sb + "/processes/p1/kill", ct: "json", body: `{}`, status: 204, called: true},
		{name: "upload", method: "PUT", target: sb + "/files?path=/work/a.bin&mode=0755&parents=true", ct: "application/octet-stream", body: "0123456789", status: 201, called: true,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				if !strings.Contains(rec.Body.String(), `"size":10`) || !strings.Contains(rec.Body.String(), `"mode":"0755"`) {
					t.Errorf("upload answer %s", rec.Body)
				}
			}},
		{name: "download", method: "GET", target: sb + "/files?path=/work/a.txt", status: 200, called: true, check: func(t *testing.T, rec *httptest.ResponseRecorder) {
			bodyIs("content")(t, rec)
			header("Content-Length", "7")(t, rec)
			header(api.HeaderMode, "0644")(t, rec)
			header(api.HeaderModTime, backendtest.Epoch.Format(time.RFC3339Nano))(t, rec)
			header("Content-Type", "application/octet-stream")(t, rec)
		}},
		{name: "remove file", method: "DELETE", target: sb + "/files?path=/work/a&recursive=true", status: 204, called: true},
		{name: "stat", method: "GET", target: sb + "/files/stat?path=/etc/hostname", status: 200, called: true},
		{name: "list files", method: "GET", target: sb + "/files/list?path=/work", status: 200, called: true},
		{name: "mkdir", method: "POST", target: sb + "/files/mkdir", ct: "json", body: `{"path":"/work/d","mode":"0700","parents":true}`, status: 201, called: true},
		{name: "mkdir owned", method: "POST", target: sb + "/files/mkdir", ct: "json", body: `{"path":"/work/d","owner":"user"}`, status: 201, called: true},
		{name: "list depth", method: "GET", target: sb + "/files/list?path=/work&depth=2", status: 200, called: true},
		{name: "move", method: "POST", target: sb + "/files/move", ct: "json", body: `{"source":"/work/a","destination":"/work/b/c","parents":true,"owner":"1000"}`, status: 200, called: true},
	}...)
}

// errorCases are refused by the server (Backend not called) or fail in
// the Backend.
func errorCases() []apiCase {
	long := strings.Repeat("a", 200)
	bigJSON := `{"image":"` + strings.Repeat("x", api.MaxJSONBodyBytes) + `"}`
	fail := func(err error) func(b *backendtest.Fake) {
		return func(b *backendtest.Fake) {
			b.GetSandboxFn = func(context.Context, string) (api.Sandbox, error) { return api.Sandbox{}, err }
			b.CreateSandboxFn = func(context.Context, api.CreateSandboxRequest) (api.Sandbox, error) { return api.Sandbox{}, err }
			b.ExecFn = func(context.Context, string, api.ExecRequest, func(string, int), io.Writer, io.Writer) (api.ExitStatus, error) {
				return api.ExitStatus{}, err
			}
			b.ProcessOutputFn = func(context.Context, string, string, int64, bool, func(api.ExecEvent) error) error { return err }
			b.DownloadFn = func(context.Context, string, string, func(api.FileInfo) io.Writer) error { return err }
			b.ListFn = func(context.Context, string, string, int) ([]api.FileInfo, error) { return nil, err }
			b.WriteStdinFn = func(context.Context, string, string, io.Reader, bool) (int64, error) { return 0, err }
			b.DeleteSandboxFn = func(context.Context, string, bool) error { return err }
			b.AuditFn = func(context.Context, string, func(audit.Entry) error) error { return err }
		}
	}
	capErr := api.Errorf(429, api.CodeCapacity, "not enough memory: 512 MiB asked, 256 MiB free")
	capErr.Details = map[string]any{"memory_mib": 512, "free_memory_mib": 256}
	return []apiCase{
		// The interactive exec without a WebSocket upgrade.
		{name: "exec ws without upgrade", method: "GET", target: sb + "/exec/ws", status: 400, code: api.CodeBadRequest,
			check: messageHas("is a WebSocket endpoint")},
		// JSON bodies.
		{name: "wrong content type", method: "POST", target: "/v1/sandboxes", ct: "text/plain", body: `{"image":"/i"}`, status: 415, code: api.CodeUnsupportedMedia, offDoc: true},
		{name: "form content type", method: "POST", target: sb + "/exec", ct: "application/x-www-form-urlencoded", body: `cmd=true`, status: 415, code: api.CodeUnsupportedMedia, offDoc: true},
		{name: "body over 1 MiB", method: "POST", target: "/v1/sandboxes", ct: "json", body: bigJSON, status: 413, code: api.CodeTooLarge, offDoc: true},
		{name: "unknown field", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","imagee":"x"}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`unknown field "imagee"`)},
		{name: "field in the wrong case", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"Image":"/i"}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`unknown field "Image"`)},
		{name: "unknown nested field", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","limits":{"ttl":5}}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`unknown field "limits.ttl"`)},
		{name: "wrong type", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","vcpus":"2"}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`field "vcpus" must be an integer, not a string`)},
		{name: "wrong nested type", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","limits":{"ttl_seconds":1.5}}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`field "limits.ttl_seconds" must be an integer, not number 1.5`)},
		{name: "cmd not an array", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":"ls"}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`field "cmd" must be an array of strings`)},
		{name: "negative uid", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["id"],"uid":-1}`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas(`field "uid" must be an integer from 0 to 4294967295, not number -1`)},
		{name: "bad base64", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["cat"],"stdin":"!!"}`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "trailing garbage", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"} x`, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas("after the JSON object")},
		{name: "two objects", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"}{"image":"/j"}`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "empty body", method: "POST", target: "/v1/sandboxes", ct: "json", body: ``, status: 400, code: api.CodeBadRequest, offDoc: true,
			check: messageHas("empty")},
		{name: "null body", method: "POST", target: "/v1/sandboxes", ct: "json", body: `null`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "array body", method: "POST", target: sb + "/exec", ct: "json", body: `["ls"]`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "bad json", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":}`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "truncated json", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"`, status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "kill empty body", method: "POST", target: sb + "/processes/p1/kill", ct: "json", body: ``, status: 400, code: api.CodeBadRequest, offDoc: true},

		// Sandbox references.
		{name: "ref dot dot", method: "GET", target: "/v1/sandboxes/..", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref escaped dot dot", method: "GET", target: "/v1/sandboxes/%2e%2e", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref escaped dot dot exec", method: "POST", target: "/v1/sandboxes/%2e%2e/exec", ct: "json", body: `{"cmd":["true"]}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref with escaped slash", method: "GET", target: "/v1/sandboxes/a%2Fb", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref traversal inside", method: "GET", target: "/v1/sandboxes/a%2F..%2F..%2Fetc", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref too long", method: "GET", target: "/v1/sandboxes/" + long, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref leading dash", method: "GET", target: "/v1/sandboxes/-x", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref with space", method: "DELETE", target: "/v1/sandboxes/a%20b", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "ref with NUL", method: "GET", target: "/v1/sandboxes/a%00b/console", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "double slash", method: "GET", target: "/v1//sandboxes", status: 400, code: api.CodeInvalidArgument, offDoc: true},

		// Create.
		{name: "create without image", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"name":"w"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "create blank image", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":" "}`, status: 400, code: api.CodeInvalidArgument},
		{name: "create bad name", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","name":"../x"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "create name like an id", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","name":"abcdef012345"}`, status: 400, code: api.CodeInvalidArgument,
			check: messageHas("looks like a sandbox ID")},
		{name: "create too many labels", method: "POST", target: "/v1/sandboxes", ct: "json", body: manyLabels(65), status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "create bad label key", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","labels":{"-k":"v"}}`, status: 400, code: api.CodeInvalidArgument},
		{name: "create long label value", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","labels":{"k":"` + strings.Repeat("é", 129) + `"}}`, status: 400, code: api.CodeInvalidArgument,
			check: messageHas("258-byte value")},
		{name: "create negative vcpus", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","vcpus":-1,"memory_mib":-2}`, status: 400, code: api.CodeInvalidArgument, offDoc: true,
			check: messageHas("memory_mib is -2, vcpus is -1")},
		{name: "create negative ttl", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","limits":{"ttl_seconds":-1}}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "create bad accel", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","accel":"xen"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},

		// Exec.
		{name: "exec empty cmd", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":[]}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec no cmd", method: "POST", target: sb + "/exec", ct: "json", body: `{}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec empty argv0", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":[""]}`, status: 400, code: api.CodeInvalidArgument},
		{name: "exec NUL in arg", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["echo","a\u0000b"]}`, status: 400, code: api.CodeInvalidArgument},
		{name: "exec env without =", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["env"],"env":["FOO"]}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec env empty key", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["env"],"env":["=x"]}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec env NUL", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["env"],"env":["A=\u0000"]}`, status: 400, code: api.CodeInvalidArgument},
		{name: "exec relative cwd", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["ls"],"cwd":"work"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec negative timeout", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["ls"],"timeout_ms":-1}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "exec stdin_open attached", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["cat"],"stdin_open":true}`, status: 400, code: api.CodeInvalidArgument},
		{name: "process empty cmd", method: "POST", target: sb + "/processes", ct: "json", body: `{"cmd":[]}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "kill bad signal", method: "POST", target: sb + "/processes/p1/kill", ct: "json", body: `{"signal":"TERM;rm"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},

		// Process ids.
		{name: "pid upper case", method: "GET", target: sb + "/processes/P1", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "pid with dash", method: "GET", target: sb + "/processes/a-b/output", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "pid too long", method: "POST", target: sb + "/processes/" + strings.Repeat("a", 33) + "/stdin", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument, offDoc: true},

		// Paths and modes.
		{name: "path missing", method: "GET", target: sb + "/files/stat", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "path relative", method: "GET", target: sb + "/files?path=etc/passwd", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "path traversal", method: "PUT", target: sb + "/files?path=/work/../../etc/passwd", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument},
		{name: "path NUL", method: "DELETE", target: sb + "/files?path=/work/a%00b", status: 400, code: api.CodeInvalidArgument},
		{name: "path too long", method: "GET", target: sb + "/files/list?path=/" + strings.Repeat("a", 4096), status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "remove root", method: "DELETE", target: sb + "/files?path=/&recursive=true", status: 400, code: api.CodeInvalidArgument},
		{name: "mode not octal", method: "PUT", target: sb + "/files?path=/a&mode=0999", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "mode too big", method: "PUT", target: sb + "/files?path=/a&mode=17777", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument},
		{name: "mode negative", method: "PUT", target: sb + "/files?path=/a&mode=-1", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "mkdir relative", method: "POST", target: sb + "/files/mkdir", ct: "json", body: `{"path":"d"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "mkdir traversal", method: "POST", target: sb + "/files/mkdir", ct: "json", body: `{"path":"/a/../../b"}`, status: 400, code: api.CodeInvalidArgument},
		{name: "move relative", method: "POST", target: sb + "/files/move", ct: "json", body: `{"source":"a","destination":"/b"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "move root", method: "POST", target: sb + "/files/move", ct: "json", body: `{"source":"/","destination":"/b"}`, status: 400, code: api.CodeInvalidArgument},
		{name: "move no destination", method: "POST", target: sb + "/files/move", ct: "json", body: `{"source":"/a"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "move bad owner", method: "POST", target: sb + "/files/move", ct: "json", body: `{"source":"/a","destination":"/b","owner":"a b"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "upload bad owner", method: "PUT", target: sb + "/files?path=/a&owner=-x", ct: "application/octet-stream", body: "x", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "list depth too deep", method: "GET", target: sb + "/files/list?path=/a&depth=65", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "mkdir bad mode", method: "POST", target: sb + "/files/mkdir", ct: "json", body: `{"path":"/d","mode":"rwx"}`, status: 400, code: api.CodeInvalidArgument, offDoc: true},

		// Queries.
		{name: "unknown query parameter", method: "DELETE", target: sb + "?forse=true", status: 400, code: api.CodeBadRequest, offDoc: true, check: messageHas(`unknown query parameter "forse": this route takes force`)},
		{name: "query on a route without", method: "GET", target: "/v1/info?x=1", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "query given twice", method: "GET", target: sb + "/console?tail=1&tail=2", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "bad bool", method: "DELETE", target: sb + "?force=yes", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "negative offset", method: "GET", target: sb + "/processes/p1/output?offset=-1", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "bad tail", method: "GET", target: sb + "/console?tail=1k", status: 400, code: api.CodeBadRequest, offDoc: true},
		{name: "label filter without =", method: "GET", target: "/v1/sandboxes?label=team", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "label filter bad key", method: "GET", target: "/v1/sandboxes?label=%2Fk%3Dv", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "bad state", method: "GET", target: "/v1/sandboxes?state=zombie", status: 400, code: api.CodeInvalidArgument, offDoc: true},
		{name: "malformed query", method: "GET", target: "/v1/sandboxes?state=%zz", status: 400, code: api.CodeBadRequest, offDoc: true},

		// Backend errors keep their status and code.
		{name: "not found", method: "GET", target: sb, status: 404, code: api.CodeNotFound, called: true,
			setup: fail(api.Errorf(404, api.CodeNotFound, "no sandbox %s", backendtest.SandboxID))},
		{name: "name taken", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i","name":"w"}`, status: 409, code: api.CodeNameTaken, called: true,
			setup: fail(api.Errorf(409, api.CodeNameTaken, "name w is taken"))},
		{name: "invalid image", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/nope"}`, status: 422, code: api.CodeInvalidImage, called: true,
			setup: fail(api.Errorf(422, api.CodeInvalidImage, "no manifest.toml in /nope"))},
		{name: "capacity", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"}`, status: 429, code: api.CodeCapacity, called: true,
			setup: fail(capErr), check: messageHas(`"free_memory_mib":256`)},
		{name: "boot failed", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"}`, status: 500, code: api.CodeBootFailed, called: true,
			setup: fail(api.Errorf(500, api.CodeBootFailed, "guest did not come up"))},
		{name: "unavailable", method: "POST", target: "/v1/sandboxes", ct: "json", body: `{"image":"/i"}`, status: 503, code: api.CodeUnavailable, called: true,
			setup: fail(api.Errorf(503, api.CodeUnavailable, "shutting down"))},
		{name: "sandbox running", method: "DELETE", target: sb, status: 409, code: api.CodeSandboxRunning, called: true,
			setup: fail(api.Errorf(409, api.CodeSandboxRunning, "use force"))},
		{name: "exec not running", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["true"]}`, status: 409, code: api.CodeNotRunning, called: true,
			setup: fail(api.Errorf(409, api.CodeNotRunning, "sandbox is stopped"))},
		{name: "exec limit", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["true"]}`, status: 429, code: api.CodeExecLimit, called: true,
			setup: fail(api.Errorf(429, api.CodeExecLimit, "max_execs reached"))},
		{name: "exec wrapped error", method: "POST", target: sb + "/exec", ct: "json", body: `{"cmd":["true"]}`, status: 503, code: api.CodeGuestDied, called: true,
			setup: fail(errorsJoin(api.Errorf(503, api.CodeGuestDied, "guest died")))},
		{name: "plain error is internal", method: "GET", target: sb, status: 500, code: api.CodeInternal, called: true,
			setup: fail(errors.New("disk on fire"))},
		{name: "output dropped", method: "GET", target: sb + "/processes/p1/output?offset=1", status: 410, code: api.CodeOutputDropped, called: true,
			setup: fail(api.Errorf(410, api.CodeOutputDropped, "offset 1 is gone"))},
		{name: "stdin closed", method: "POST", target: sb + "/processes/p1/stdin", ct: "application/octet-stream", body: "x", status: 409, code: api.CodeStdinClosed, called: true,
			setup: fail(api.Errorf(409, api.CodeStdinClosed, "stdin closed"))},
		{name: "not a file", method: "GET", target: sb + "/files?path=/etc", status: 422, code: api.CodeNotAFile, called: true,
			setup: fail(api.Errorf(422, api.CodeNotAFile, "/etc is a directory"))},
		{name: "not a directory", method: "GET", target: sb + "/files/list?path=/etc/passwd", status: 422, code: api.CodeNotADirectory, called: true,
			setup: fail(api.Errorf(422, api.CodeNotADirectory, "/etc/passwd is a file"))},
		{name: "audit not found", method: "GET", target: sb + "/audit", status: 404, code: api.CodeNotFound, called: true,
			setup: fail(api.Errorf(404, api.CodeNotFound, "no such sandbox"))},
		{name: "metrics disabled", method: "GET", target: "/metrics", status: 404, code: api.CodeNotFound, check: func(*testing.T, *httptest.ResponseRecorder) {}},
	}
}

func errorsJoin(e error) error { return errors.Join(errors.New("context"), e) }

func manyLabels(n int) string {
	var b strings.Builder
	b.WriteString(`{"image":"/i","labels":{`)
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strings.Repeat("x", i) + `":"v"`)
	}
	b.WriteString("}}")
	return b.String()
}

func lines(n int) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if got := strings.Count(rec.Body.String(), "\n"); got != n {
			t.Errorf("%d lines, want %d:\n%s", got, n, rec.Body)
		}
	}
}

func bodyIs(want string) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if rec.Body.String() != want {
			t.Errorf("body %q, want %q", rec.Body, want)
		}
	}
}

func header(name, want string) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		if got := rec.Header().Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
}

func messageHas(sub string) func(*testing.T, *httptest.ResponseRecorder) {
	return func(t *testing.T, rec *httptest.ResponseRecorder) {
		t.Helper()
		var er api.ErrorResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil {
			t.Fatalf("error answer %q: %v", rec.Body, err)
		}
		details, _ := json.Marshal(er.Error.Details)
		if text := er.Error.Message + " " + string(details); !strings.Contains(text, sub) {
			t.Errorf("error %q does not contain %q", text, sub)
		}
	}
}

// TestOpenAPIMatchesHandlers drives every route through the real handler
// with a fake Backend and validates requests and answers against the
// document, including error answers and every line of ndjson streams.
func TestOpenAPIMatchesHandlers(t *testing.T) {
	doc := loadDoc(t)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	covered := map[string]bool{}
	run := func(t *testing.T, c apiCase) {
		b := &backendtest.Fake{}
		if c.setup != nil {
			c.setup(b)
		}
		cfg := apiserver.Config{Backend: b, Metrics: promhttp.HandlerFor(prometheus.NewRegistry(), promhttp.HandlerOpts{})}
		if c.name == "metrics disabled" {
			cfg.Metrics = nil
		}
		if c.router != nil {
			cfg.Router, cfg.Keyring = c.router, auth.New(auth.Config{Peer: "0123456789abcdef"})
		}
		srv, err := apiserver.NewServer(cfg)
		if err != nil {
			t.Fatal(err)
		}
		newReq := func() *http.Request {
			r := httptest.NewRequest(c.method, "http://localhost"+c.target, strings.NewReader(c.body))
			switch c.ct {
			case "json":
				r.Header.Set("Content-Type", "application/json")
			case "":
			default:
				r.Header.Set("Content-Type", c.ct)
			}
			return r
		}
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, newReq())

		if rec.Code != c.status {
			t.Fatalf("status %d, want %d; body %s", rec.Code, c.status, rec.Body)
		}
		if calls := b.Calls(); c.called != (len(calls) > 0) {
			t.Errorf("backend calls %v, want called = %v", calls, c.called)
		}
		if c.code != "" {
			var er api.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil {
				t.Fatalf("error answer %q: %v", rec.Body, err)
			}
			if er.Error.Code != c.code || er.Error.Message == "" {
				t.Errorf("error %+v, want code %s with a message", er.Error, c.code)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("error Content-Type %q", ct)
			}
		}
		if c.check != nil {
			c.check(t, rec)
		}

		vreq := newReq()
		route, params, err := router.FindRoute(vreq)
		if err != nil {
			if c.offDoc || c.status == 405 {
				return // e.g. a ref the path pattern refuses: no route in the document
			}
			t.Fatalf("no document route for %s %s: %v", c.method, c.target, err)
		}
		if c.status < 300 {
			covered[route.Method+" "+route.Path] = true
		}
		in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
		if !c.offDoc {
			if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
				t.Errorf("request does not match openapi.yaml: %v", err)
			}
		}
		validateResponse(t, in, rec, opts)
	}
	for _, c := range successCases() {
		t.Run(c.name, func(t *testing.T) { run(t, c) })
	}
	for _, c := range errorCases() {
		t.Run(c.name, func(t *testing.T) { run(t, c) })
	}
	for _, rt := range apiserver.Routes() {
		if rt.Path == "/v1/sandboxes/{id}/exec/ws" || rt.Path == "/v1/sandboxes/{id}/processes/{pid}/ws" {
			continue // its success is a 101 upgrade a recorder cannot do: TestExecWSUpgradeMatchesDocument, TestProcessWS
		}
		if !covered[rt.Method+" "+rt.Path] {
			t.Errorf("no success case for %s %s", rt.Method, rt.Path)
		}
	}
}

// validateResponse validates rec against the document; an ndjson stream
// line by line.
func validateResponse(t *testing.T, in *openapi3filter.RequestValidationInput, rec *httptest.ResponseRecorder, opts *openapi3filter.Options) {
	t.Helper()
	bodies := [][]byte{rec.Body.Bytes()}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), api.ContentTypeNDJSON) {
		bodies = nil
		sc := bufio.NewScanner(bytes.NewReader(rec.Body.Bytes()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			bodies = append(bodies, slices.Clone(sc.Bytes()))
		}
		if len(bodies) == 0 {
			bodies = [][]byte{nil}
			opts = &openapi3filter.Options{AuthenticationFunc: opts.AuthenticationFunc, IncludeResponseStatus: true, ExcludeResponseBody: true}
		}
	}
	for _, body := range bodies {
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(body)), Options: opts,
		}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("answer does not match openapi.yaml: %v\nbody: %.300s", err, body)
		}
	}
}

func init() {
	// Each line of an ndjson stream is validated alone, as JSON.
	openapi3filter.RegisterBodyDecoder(api.ContentTypeNDJSON, openapi3filter.JSONBodyDecoder)
}
