package isolation

// From an API client: every place a client string becomes a host path
// (image directories, template names, sandbox and snapshot references that
// name directories under --state-dir, warm template keys, process ids,
// console and audit routes) attacked with traversal, symlinks and odd
// bytes; oversized and malformed requests. Each gets its exact refusal
// (status and error code) and nothing is created. No guest boots.

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// clientCase is one request and the refusal it must get. code "" means a
// non-JSON answer from Go's HTTP server (431), whose body is body.
type clientCase struct {
	what   string
	method string
	path   string
	ctype  string
	body   []byte
	hdr    http.Header
	status int
	code   string
	body2  string // the exact plain-text body when code is ""
}

func TestIsolationFromClient(t *testing.T) {
	img := testenv.Image(t)
	d := newDaemon(t, "--template", "base="+img)
	d.start()

	// A directory of symlinks out: to /etc, to the daemon's state, and an
	// image directory whose manifest is a symlink to the real one but
	// whose disk points at the daemon's store.
	links := t.TempDir()
	must(t, "symlink", os.Symlink("/etc", filepath.Join(links, "etc")))
	must(t, "symlink", os.Symlink(d.State, filepath.Join(links, "state")))
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	create := func(fields string) []byte { return []byte("{" + fields + "}") }
	j := "application/json"

	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []clientCase{
		// Image paths: relative, traversal, not an image, symlinks out, NUL.
		{what: "relative image path", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":"../../../etc"`), status: 400, code: "invalid_argument"},
		{what: "image traversal to /etc", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":` + js(img+"/../../../../../../etc")), status: 422, code: "invalid_image"},
		{what: "image is /etc/shadow", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":"/etc/shadow"`), status: 422, code: "invalid_image"},
		{what: "image is the daemon's state dir", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":` + js(d.State)), status: 422, code: "invalid_image"},
		{what: "image is a symlink to /etc", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":` + js(filepath.Join(links, "etc"))), status: 422, code: "invalid_image"},
		{what: "image is a symlink to the state dir", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":` + js(filepath.Join(links, "state"))), status: 422, code: "invalid_image"},
		{what: "image is /proc/self/cwd", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":"/proc/self/cwd"`), status: 422, code: "invalid_image"},
		{what: "image with NUL", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"image":"/etc\u0000/x"`), status: 400, code: "invalid_argument"},
		// Template names.
		{what: "template traversal", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"../base"`), status: 400, code: "invalid_argument"},
		{what: "template absolute", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"/etc"`), status: 400, code: "invalid_argument"},
		{what: "template dot-dot", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":".."`), status: 400, code: "invalid_argument"},
		{what: "unknown template", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base.."`), status: 404, code: "template_not_found"},
		// Names that would become directories.
		{what: "name traversal", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","name":"../../x"`), status: 400, code: "invalid_argument"},
		{what: "name dot-dot", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","name":".."`), status: 400, code: "invalid_argument"},
		{what: "name with NUL", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","name":"a\u0000b"`), status: 400, code: "invalid_argument"},
		{what: "name with invalid UTF-8", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte("{\"template\":\"base\",\"name\":\"a\xff\xfe\"}"), status: 400, code: "invalid_argument"},
		{what: "label key traversal", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","labels":{"../x":"y"}`), status: 400, code: "invalid_argument"},
		// Sandbox references in routes (each names STATE/sandboxes/ID).
		{what: "sandbox ref %2F traversal", method: "GET", path: "/v1/sandboxes/..%2F..%2Fstate.db", status: 400, code: "invalid_argument"},
		{what: "sandbox ref dot-dot", method: "GET", path: "/v1/sandboxes/%2e%2e", status: 400, code: "invalid_argument"},
		{what: "sandbox ref NUL", method: "GET", path: "/v1/sandboxes/a%00b", status: 400, code: "invalid_argument"},
		{what: "console traversal", method: "GET", path: "/v1/sandboxes/..%2F..%2Fetc/console", status: 400, code: "invalid_argument"},
		{what: "audit traversal", method: "GET", path: "/v1/sandboxes/..%2Faudit/audit", status: 400, code: "invalid_argument"},
		{what: "audit of an unknown sandbox", method: "GET", path: "/v1/sandboxes/nosuch/audit", status: 404, code: "not_found"},
		{what: "delete traversal", method: "DELETE", path: "/v1/sandboxes/..%2F..?force=true", status: 400, code: "invalid_argument"},
		{what: "process id traversal", method: "GET", path: "/v1/sandboxes/nosuch/processes/..%2F..%2Fx", status: 400, code: "invalid_argument"},
		{what: "port traversal", method: "DELETE", path: "/v1/sandboxes/nosuch/ports/..%2F80", status: 400, code: "invalid_argument"},
		// Snapshot names (STATE/snapshots/NAME) and warm keys.
		{what: "snapshot ref traversal", method: "GET", path: "/v1/snapshots/..%2F..%2Fstate.db", status: 400, code: "invalid_argument"},
		{what: "snapshot delete dot-dot", method: "DELETE", path: "/v1/snapshots/%2E%2E", status: 400, code: "invalid_argument"},
		{what: "snapshot restore traversal", method: "POST", path: "/v1/snapshots/..%2Fsandboxes/restore", ctype: j, body: []byte(`{}`), status: 400, code: "invalid_argument"},
		{what: "snapshot save name traversal", method: "POST", path: "/v1/sandboxes/nosuch/snapshots", ctype: j, body: []byte(`{"name":"../../state.db"}`), status: 400, code: "invalid_argument"},
		{what: "snapshot save name dot", method: "POST", path: "/v1/sandboxes/nosuch/snapshots", ctype: j, body: []byte(`{"name":"."}`), status: 400, code: "invalid_argument"},
		{what: "snapshot list filter traversal", method: "GET", path: "/v1/snapshots?sandbox=..%2F..", status: 400, code: "invalid_argument"},
		{what: "warm key traversal", method: "DELETE", path: "/v1/warm/..%2F..%2Fstate.db", status: 400, code: "invalid_argument"},
		// Guest paths are checked too (they never become host paths).
		{what: "relative guest path", method: "GET", path: "/v1/sandboxes/nosuch/files?path=..%2Fetc%2Fshadow", status: 400, code: "invalid_argument"},
		{what: "guest path dot-dot", method: "GET", path: "/v1/sandboxes/nosuch/files?path=%2Fwork%2F..%2F..%2Fetc", status: 400, code: "invalid_argument"},
		// Oversized.
		{what: "JSON body over 1 MiB", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","name":"` + strings.Repeat("a", 1<<20) + `"`), status: 413, code: "payload_too_large"},
		{what: "huge header", method: "GET", path: "/v1/info", hdr: http.Header{"X-Big": {strings.Repeat("h", 80<<10)}}, status: 431, body2: "431 Request Header Fields Too Large"},
		{what: "huge URL", method: "GET", path: "/v1/sandboxes/" + strings.Repeat("a", 80<<10), status: 431, body2: "431 Request Header Fields Too Large"},
		{what: "deep JSON", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","env":` + deep), status: 400, code: "bad_request"},
		{what: "many labels", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","labels":` + manyLabels(100)), status: 400, code: "invalid_argument"},
		// Malformed.
		{what: "truncated JSON", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`{"template":`), status: 400, code: "bad_request"},
		{what: "JSON array", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`[]`), status: 400, code: "bad_request"},
		{what: "wrong type", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`{"template":5}`), status: 400, code: "bad_request"},
		{what: "NUL byte in JSON", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte("{\"template\":\"base\"\x00}"), status: 400, code: "bad_request"},
		{what: "invalid UTF-8 outside strings", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte("{\"template\xff\":\"base\"}"), status: 400, code: "bad_request"},
		{what: "two objects", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`{"template":"base"}{}`), status: 400, code: "bad_request"},
		{what: "unknown field", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`{"template":"base","state_dir":"/"}`), status: 400, code: "bad_request"},
		{what: "field in other case", method: "POST", path: "/v1/sandboxes", ctype: j, body: []byte(`{"Template":"base"}`), status: 400, code: "bad_request"},
		{what: "wrong Content-Type", method: "POST", path: "/v1/sandboxes", ctype: "text/plain", body: []byte(`{"template":"base"}`), status: 415, code: "unsupported_media"},
		{what: "bad query escape", method: "DELETE", path: "/v1/sandboxes/nosuch?force=%zz", status: 400, code: "bad_request"},
		{what: "repeated query", method: "DELETE", path: "/v1/sandboxes/nosuch?force=true&force=false", status: 400, code: "bad_request"},
		{what: "env with NUL", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","env":["A=b\u0000c"]`), status: 400, code: "invalid_argument"},
		{what: "negative memory", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","memory_mib":-1`), status: 400, code: "invalid_argument"},
		{what: "huge number", method: "POST", path: "/v1/sandboxes", ctype: j, body: create(`"template":"base","memory_mib":1e400`), status: 400, code: "bad_request"},
	}
	for _, c := range cases {
		t.Run(c.what, func(t *testing.T) {
			hdr := http.Header{}
			for k, v := range c.hdr {
				hdr[k] = v
			}
			if c.ctype != "" {
				hdr.Set("Content-Type", c.ctype)
			}
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			defer cancel()
			st, body, rh, err := d.RoundTrip(ctx, c.method, c.path, c.body, hdr)
			if err != nil {
				t.Fatalf("%s %.100s: %v", c.method, c.path, err)
			}
			if c.code == "" {
				if st != c.status || string(body) != c.body2 {
					t.Errorf("%s %.100s: %d %q, want %d %q", c.method, c.path, st, body, c.status, c.body2)
				}
				return
			}
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if json.Unmarshal(body, &e) != nil || rh.Get("Content-Type") != "application/json" || st != c.status || e.Error.Code != c.code || e.Error.Message == "" {
				t.Errorf("%s %.100s: %d %.300s, want %d %s with a message", c.method, c.path, st, body, c.status, c.code)
			}
		})
	}

	// Nothing was made: no sandbox, no snapshot, the daemon still answers,
	// and no file appeared outside the daemon's own dirs.
	var list struct {
		Sandboxes []any `json:"sandboxes"`
	}
	if err := json.Unmarshal(d.call("GET", "/v1/sandboxes", "", http.StatusOK), &list); err != nil || len(list.Sandboxes) != 0 {
		t.Errorf("after the refused requests: %d sandboxes (%v), want none", len(list.Sandboxes), err)
	}
	left, _ := filepath.Glob(filepath.Join(d.State, "sandboxes", "*"))
	snaps, _ := filepath.Glob(filepath.Join(d.State, "snapshots", "*"))
	if len(left)+len(snaps) != 0 {
		t.Errorf("the refused requests left %v %v", left, snaps)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(d.State), "x")); err == nil {
		t.Errorf("a traversal made %s", filepath.Join(filepath.Dir(d.State), "x"))
	}
}

func manyLabels(n int) string {
	m := map[string]string{}
	for i := range n {
		m["k"+strings.Repeat("x", i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	b, _ := json.Marshal(m)
	return string(b)
}
