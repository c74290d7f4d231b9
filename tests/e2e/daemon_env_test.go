package e2e

// What the daemon tests share: a `agentbox serve` subprocess with its own
// socket, state and runtime dirs (restartable on the same dirs), a raw
// HTTP client over its unix socket that spells the wire format itself
// (no vmctl/client), and the cleanup that leaves no sandbox behind.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/tests/testenv"
)

// Wire types: the JSON the API documents (vmctl/api/openapi.yaml), spelled
// here independently of the Go types so a renamed field fails the tests.
type (
	wireSandbox struct {
		ID        string            `json:"id"`
		Name      string            `json:"name"`
		State     string            `json:"state"`
		Reason    string            `json:"reason"`
		Domain    string            `json:"domain"`
		Accel     string            `json:"accel"`
		VCPUs     int               `json:"vcpus"`
		MemoryMiB int               `json:"memory_mib"`
		Labels    map[string]string `json:"labels"`
		ExecCount int               `json:"exec_count"`
		Tainted   []string          `json:"tainted"`
		Image     struct {
			Name string `json:"name"`
			Dir  string `json:"dir"`
		} `json:"image"`
		Limits struct {
			TTLSeconds         int64 `json:"ttl_seconds"`
			IdleTimeoutSeconds int64 `json:"idle_timeout_seconds"`
		} `json:"limits"`
	}
	wireList struct {
		Sandboxes []wireSandbox `json:"sandboxes"`
	}
	wireErr struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	}
	wireErrorBody struct {
		Error wireErr `json:"error"`
	}
	wireExit struct {
		ExitCode   int    `json:"exit_code"`
		Signal     int    `json:"signal"`
		TimedOut   bool   `json:"timed_out"`
		TimeoutMs  int64  `json:"timeout_ms"`
		Error      string `json:"error"`
		DurationMs int64  `json:"duration_ms"`
	}
	wireEvent struct {
		Type   string    `json:"type"`
		ExecID string    `json:"exec_id"`
		Pid    int       `json:"pid"`
		Data   []byte    `json:"data"`
		Offset int64     `json:"offset"`
		Exit   *wireExit `json:"exit"`
		Error  *wireErr  `json:"error"`
	}
	wireProcess struct {
		ID          string     `json:"id"`
		Pid         int        `json:"pid"`
		Cmd         []string   `json:"cmd"`
		State       string     `json:"state"`
		Exit        *wireExit  `json:"exit"`
		StdinOpen   bool       `json:"stdin_open"`
		OutputBytes int64      `json:"output_bytes"`
		EndedAt     *time.Time `json:"ended_at"`
	}
	wireFile struct {
		Name string `json:"name"`
		Path string `json:"path"`
		Type string `json:"type"`
		Size int64  `json:"size"`
		Mode string `json:"mode"`
	}
	wireAudit struct {
		Time     time.Time      `json:"time"`
		Sandbox  string         `json:"sandbox"`
		Caller   string         `json:"caller"`
		Action   string         `json:"action"`
		Args     map[string]any `json:"args"`
		ExecID   string         `json:"exec_id"`
		ExitCode *int           `json:"exit_code"`
		BytesIn  int64          `json:"bytes_in"`
		BytesOut int64          `json:"bytes_out"`
		Error    string         `json:"error"`
	}
)

// requestTimeout bounds every API request of the tests (a create boots a
// guest under TCG; a 50 MiB transfer takes a while): a hung daemon fails
// the test instead of the whole run.
const requestTimeout = 2 * time.Minute

// daemon is one `agentbox serve` under test (testenv.Daemon) with the
// suite's typed helpers. Its cleanup (registered by newDaemon) removes
// every sandbox through the API — restarting the daemon first if the test
// left it dead — stops it with SIGTERM, and asserts that no domain, qemu
// process, overlay or socket is left.
type daemon struct {
	*testenv.Daemon
	t *testing.T
}

// startDaemon starts `agentbox serve` with serveFlags on fresh dirs and
// waits until it answers.
func startDaemon(t *testing.T, serveFlags ...string) *daemon {
	t.Helper()
	testenv.Image(t) // fail early without a test image
	d := newDaemon(t, serveFlags...)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// newDaemon prepares a daemon and its cleanup without starting it.
func newDaemon(t *testing.T, serveFlags ...string) *daemon {
	t.Helper()
	d := &daemon{Daemon: testenv.NewDaemon(t, agentboxBin, serveFlags...), t: t}
	t.Cleanup(d.cleanup)
	return d
}

// cleanup restarts the daemon on the same dirs if the test left it dead
// (it adopts what still runs), tears it down (testenv.Daemon.Teardown),
// and checks that its API socket is gone.
func (d *daemon) cleanup() {
	t := d.t
	if d.Started() && !d.Running() {
		if err := d.Start(); err != nil {
			t.Errorf("restarting the daemon to clean up: %v", err)
		}
	}
	d.Teardown(requestTimeout)
	if left, _ := os.ReadDir(d.SockDir); len(left) > 0 {
		t.Errorf("the API socket is left after the daemon exited: %v", left[0].Name())
	}
	if t.Failed() {
		t.Logf("daemon log (tail):\n%s", d.Log.Tail(30000))
	}
}

// roundTrip is RoundTrip with the request's Content-Type ("" for none).
func (d *daemon) roundTrip(ctx context.Context, method, path string, body []byte, contentType string) (int, []byte, http.Header, error) {
	var hdr http.Header
	if contentType != "" {
		hdr = http.Header{"Content-Type": {contentType}}
	}
	return d.RoundTrip(ctx, method, path, body, hdr)
}

// octets is a raw request body (Content-Type application/octet-stream).
type octets []byte

// call sends a request (body: nil, a string or []byte sent as JSON, or
// octets) and fails the test unless the status is want; the body is
// returned.
func (d *daemon) call(method, path string, body any, want int) ([]byte, http.Header) {
	d.t.Helper()
	var b []byte
	ctype := ""
	switch v := body.(type) {
	case nil:
	case string:
		b, ctype = []byte(v), "application/json"
	case []byte:
		b, ctype = v, "application/json"
	case octets:
		b, ctype = v, "application/octet-stream"
	default:
		d.t.Fatalf("call: body of type %T", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, resp, hdr, err := d.roundTrip(ctx, method, path, b, ctype)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	if st != want {
		d.t.Fatalf("%s %s: status %d, want %d; body %.2000s", method, path, st, want, resp)
	}
	return resp, hdr
}

// callJSON is call that decodes the answer (Content-Type application/json)
// into out.
func (d *daemon) callJSON(method, path string, body any, want int, out any) http.Header {
	d.t.Helper()
	resp, hdr := d.call(method, path, body, want)
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		d.t.Fatalf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	if err := json.Unmarshal(resp, out); err != nil {
		d.t.Fatalf("%s %s: decoding %q: %v", method, path, resp, err)
	}
	return hdr
}

// apiError sends a request that must fail with status and code, and
// returns the error; the body must be the documented
// {"error":{"code","message"}} with a message.
func (d *daemon) apiError(method, path, contentType string, body []byte, status int, code string) wireErr {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, resp, hdr, err := d.roundTrip(ctx, method, path, body, contentType)
	if err != nil {
		d.t.Fatalf("%s %.200s: %v", method, path, err)
	}
	var e wireErrorBody
	if jerr := json.Unmarshal(resp, &e); jerr != nil || hdr.Get("Content-Type") != "application/json" {
		d.t.Errorf("%s %.200s: status %d, body %.500q (%s) is not a JSON error: %v", method, path, st, resp, hdr.Get("Content-Type"), jerr)
		return e.Error
	}
	if st != status || e.Error.Code != code || e.Error.Message == "" {
		d.t.Errorf("%s %.200s: %d %s %q, want %d %s with a message", method, path, st, e.Error.Code, e.Error.Message, status, code)
	}
	return e.Error
}

// create creates a sandbox (req is the JSON body) and tracks its ID.
func (d *daemon) create(req string) wireSandbox {
	d.t.Helper()
	var sb wireSandbox
	hdr := d.callJSON("POST", "/v1/sandboxes", req, http.StatusCreated, &sb)
	d.Track(sb.ID)
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(sb.ID) || sb.State != "running" || sb.Domain != "agentbox-"+sb.ID {
		d.t.Fatalf("created sandbox %+v: want a 12-hex ID, state running, domain agentbox-ID", sb)
	}
	if loc := hdr.Get("Location"); loc != "/v1/sandboxes/"+sb.ID {
		d.t.Errorf("create: Location %q, want /v1/sandboxes/%s", loc, sb.ID)
	}
	return sb
}

// createBody is the JSON of a create request for the test image under TCG
// with extra fields (a JSON fragment without braces, may be empty).
func createBody(t *testing.T, extra string) string {
	img, _ := json.Marshal(testenv.Image(t))
	body := `{"image":` + string(img) + `,"accel":"tcg"`
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

// get returns a sandbox by reference.
func (d *daemon) get(ref string) wireSandbox {
	d.t.Helper()
	var sb wireSandbox
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &sb)
	return sb
}

// list returns GET /v1/sandboxes with the raw query q ("" for all).
func (d *daemon) list(q string) []wireSandbox {
	d.t.Helper()
	var l wireList
	path := "/v1/sandboxes"
	if q != "" {
		path += "?" + q
	}
	d.callJSON("GET", path, nil, http.StatusOK, &l)
	if l.Sandboxes == nil {
		d.t.Fatalf("GET %s: \"sandboxes\" is missing or null", path)
	}
	return l.Sandboxes
}

// ids returns the IDs of sbs in order.
func ids(sbs []wireSandbox) []string {
	out := []string{}
	for _, sb := range sbs {
		out = append(out, sb.ID)
	}
	return out
}

// execResult is an attached exec's stream, checked and split up.
type execResult struct {
	status         int // HTTP status
	stdout, stderr []byte
	exit           *wireExit
	err            *wireErr // an error event (or the error answer)
	execID         string
	pid            int
}

// exec runs POST /v1/sandboxes/{ref}/exec with the JSON body req and reads
// the whole ndjson stream, checking its grammar: "started" (exec_id, pid)
// first, then stdout/stderr events whose offsets count the combined
// output, then exactly one final "exit" or "error".
func (d *daemon) exec(ref, req string) (execResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	s, err := d.startExec(ctx, ref, req)
	if err != nil {
		return execResult{}, err
	}
	if s.res.status != http.StatusOK {
		return s.res, nil
	}
	for {
		if _, err := s.next(); err == io.EOF {
			return s.res, nil
		} else if err != nil {
			return s.res, err
		}
	}
}

// mustExec is exec that fails the test on a transport or grammar error.
func (d *daemon) mustExec(ref, req string) execResult {
	d.t.Helper()
	r, err := d.exec(ref, req)
	if err != nil {
		d.t.Fatalf("exec %s: %v", req, err)
	}
	return r
}

// expectExec runs req and checks its exit code and exact output.
func (d *daemon) expectExec(ref, req string, code int, stdout, stderr string) {
	d.t.Helper()
	r := d.mustExec(ref, req)
	if r.status != http.StatusOK || r.exit == nil || r.exit.ExitCode != code || string(r.stdout) != stdout || string(r.stderr) != stderr {
		d.t.Fatalf("exec %s: status %d, exit %+v, error %+v, stdout %q, stderr %q; want exit %d, stdout %q, stderr %q",
			req, r.status, r.exit, r.err, r.stdout, r.stderr, code, stdout, stderr)
	}
}

// execStream reads one exec's ndjson answer event by event.
type execStream struct {
	body   io.ReadCloser
	rd     *bufio.Reader
	res    execResult
	n      int   // events read
	offset int64 // output bytes so far
	ended  bool
}

// startExec sends the exec request and returns its stream once the answer
// began; an error answer (non-200) is in res with the stream ended.
func (d *daemon) startExec(ctx context.Context, ref, req string) (*execStream, error) {
	hreq, err := http.NewRequestWithContext(ctx, "POST", "http://agentbox/v1/sandboxes/"+ref+"/exec", strings.NewReader(req))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := d.HTTP.Do(hreq)
	if err != nil {
		return nil, err
	}
	s := &execStream{body: resp.Body, rd: bufio.NewReaderSize(resp.Body, 1<<20)}
	s.res.status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e wireErrorBody
		if err := json.Unmarshal(b, &e); err != nil {
			return nil, fmt.Errorf("error answer %d is not JSON: %q", resp.StatusCode, b)
		}
		s.res.err = &e.Error
		s.ended = true
		return s, nil
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		resp.Body.Close()
		return nil, fmt.Errorf("exec answer Content-Type %q, want application/x-ndjson", ct)
	}
	return s, nil
}

// next returns the next event; io.EOF after the final one (and a clean
// end of the body), another error for a broken stream or grammar.
func (s *execStream) next() (wireEvent, error) {
	line, err := s.rd.ReadBytes('\n')
	if s.ended {
		s.body.Close()
		if len(line) > 0 || err != io.EOF {
			return wireEvent{}, fmt.Errorf("data after the final event: %q (%v)", line, err)
		}
		return wireEvent{}, io.EOF
	}
	if err != nil {
		s.body.Close()
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return wireEvent{}, fmt.Errorf("stream ended without exit or error event after %d events: %w (partial line %q)", s.n, err, line)
	}
	var ev wireEvent
	if err := json.Unmarshal(line, &ev); err != nil {
		return ev, fmt.Errorf("event %d %q: %v", s.n, line, err)
	}
	s.n++
	switch ev.Type {
	case "started":
		if s.n != 1 || ev.ExecID == "" || ev.Pid <= 0 {
			return ev, fmt.Errorf("started event %q: want it first, with exec_id and pid", line)
		}
		s.res.execID, s.res.pid = ev.ExecID, ev.Pid
	case "stdout", "stderr":
		if ev.Offset != s.offset || len(ev.Data) == 0 {
			return ev, fmt.Errorf("%s event at offset %d with %d bytes, want offset %d and data", ev.Type, ev.Offset, len(ev.Data), s.offset)
		}
		s.offset += int64(len(ev.Data))
		if ev.Type == "stdout" {
			s.res.stdout = append(s.res.stdout, ev.Data...)
		} else {
			s.res.stderr = append(s.res.stderr, ev.Data...)
		}
	case "exit":
		if ev.Exit == nil {
			return ev, fmt.Errorf("exit event without exit: %q", line)
		}
		s.res.exit, s.ended = ev.Exit, true
	case "error":
		if ev.Error == nil || ev.Error.Code == "" {
			return ev, fmt.Errorf("error event without error code: %q", line)
		}
		s.res.err, s.ended = ev.Error, true
	default:
		return ev, fmt.Errorf("unknown event type in %q", line)
	}
	return ev, nil
}

// audit returns the audit entries of ref (GET /v1/sandboxes/{ref}/audit),
// or of the whole daemon when ref is "".
func (d *daemon) audit(ref string) []wireAudit {
	d.t.Helper()
	path := "/v1/audit"
	if ref != "" {
		path = "/v1/sandboxes/" + ref + "/audit"
	}
	body, hdr := d.call("GET", path, nil, http.StatusOK)
	if ct := hdr.Get("Content-Type"); ct != "application/x-ndjson" {
		d.t.Fatalf("GET %s: Content-Type %q, want application/x-ndjson", path, ct)
	}
	var out []wireAudit
	for i, line := range bytes.SplitAfter(body, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if line[len(line)-1] != '\n' {
			d.t.Fatalf("GET %s: line %d %q does not end in a newline", path, i, line)
		}
		var e wireAudit
		if err := json.Unmarshal(line, &e); err != nil {
			d.t.Fatalf("GET %s: line %d %q: %v", path, i, line, err)
		}
		out = append(out, e)
	}
	return out
}

// actions lists the entries' actions.
func actions(es []wireAudit) []string {
	out := []string{}
	for _, e := range es {
		out = append(out, e.Action)
	}
	return out
}

// cli runs `agentbox --socket S ARGS...` against this daemon.
func (d *daemon) cli(stdin []byte, args ...string) result {
	d.t.Helper()
	cmd := exec.Command(agentboxBin, append([]string{"--socket", d.Socket}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("agentbox %v: %v", args, err)
	}
	return result{stdout.Bytes(), stderr.Bytes(), code}
}

// assertGone checks that sandbox id is gone for good: 404 from the API,
// no overlay directory, no libvirt domain.
func (d *daemon) assertGone(id string) {
	d.t.Helper()
	d.apiError("GET", "/v1/sandboxes/"+id, "", nil, http.StatusNotFound, "not_found")
	if _, err := os.Stat(filepath.Join(d.State, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		d.t.Errorf("sandbox %s removed, but its directory is left: %v", id, err)
	}
	if slices.Contains(testenv.Domains(d.t), "agentbox-"+id) {
		d.t.Errorf("sandbox %s removed, but libvirt still has domain agentbox-%s", id, id)
	}
}

// auditEndsWith waits until the last audit entry of ref has action (the
// daemon writes an entry once what it records is done, so shortly after
// the API shows it) and returns all entries.
func (d *daemon) auditEndsWith(ref, action string) []wireAudit {
	d.t.Helper()
	var es []wireAudit
	testenv.WaitFor(d.t, time.Minute, "the audit of "+ref+" to end with "+action, func() bool {
		es = d.audit(ref)
		return len(es) > 0 && es[len(es)-1].Action == action
	})
	return es
}

// imageResources returns the test image's default vCPUs and memory (MiB)
// from its manifest.
func imageResources(t *testing.T) (vcpus, memoryMiB int) {
	t.Helper()
	var m struct {
		Resources struct {
			VCPUs     int `toml:"vcpus"`
			MemoryMiB int `toml:"memory_mib"`
		} `toml:"resources"`
	}
	if _, err := toml.DecodeFile(filepath.Join(testenv.Image(t), "manifest.toml"), &m); err != nil {
		t.Fatal(err)
	}
	if m.Resources.VCPUs <= 0 || m.Resources.MemoryMiB <= 0 {
		t.Fatalf("the test image's manifest has no [resources] vcpus and memory_mib: %+v", m.Resources)
	}
	return m.Resources.VCPUs, m.Resources.MemoryMiB
}
