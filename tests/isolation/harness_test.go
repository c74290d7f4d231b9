// Package isolation is issue 16's isolation suite: what a guest, QEMU's
// user and an API client try, and the exact refusal each gets. See
// tests/README.md ("Isolation suite").
package isolation

// The daemon harness of the suite: the real `agentbox serve` (built once by
// TestMain) with its own socket, state and runtime dirs, raw HTTP over its
// unix socket (the tests spell the wire format themselves), and a cleanup
// that removes every sandbox and asserts nothing is left: testenv.Daemon,
// which tests/e2e uses too, with this suite's request helpers.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// agentboxBin is the binary under test, built by TestMain.
var agentboxBin string

func TestMain(m *testing.M) {
	if openAsHelper() || plantAsHelper() { // qemuuser_test.go, qemuescape_test.go: the test binary re-executed as QEMU's user
		return
	}
	testenv.RunWithAgentbox(m, "agentbox-isolation", &agentboxBin)
}

// requestTimeout bounds every API request (a create boots a TCG guest).
const requestTimeout = 3 * time.Minute

// daemon is one `agentbox serve` under test (testenv.Daemon).
type daemon struct {
	*testenv.Daemon
	t *testing.T
	// resolvConf, when set, is bind-mounted over /etc/resolv.conf in a
	// mount namespace of the daemon's own: its upstream resolver is then
	// the test's (guest_test.go's DNS witness).
	resolvConf string
}

// newDaemon prepares a daemon on fresh dirs and registers its cleanup.
func newDaemon(t *testing.T, serveFlags ...string) *daemon {
	t.Helper()
	d := &daemon{Daemon: testenv.NewDaemon(t, agentboxBin, serveFlags...), t: t}
	t.Cleanup(d.cleanup)
	return d
}

// start runs the daemon and waits until GET /v1/info answers 200.
func (d *daemon) start() {
	d.t.Helper()
	if d.resolvConf != "" {
		// unshare and sh exec in place: the PID is the daemon's.
		d.Command = func(bin string, args []string) *exec.Cmd {
			return exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--",
				"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, d.resolvConf, bin}, args...)...)
		}
	}
	if err := d.Start(); err != nil {
		d.t.Fatal(err)
	}
}

// cleanup removes every sandbox through the daemon, stops it and asserts
// that nothing of it is left (testenv.Daemon.Teardown).
func (d *daemon) cleanup() {
	d.Teardown(requestTimeout)
	if d.t.Failed() {
		d.t.Logf("daemon log (tail):\n%s", d.Log.Tail(20000))
	}
}

// jsonHeader is the Content-Type of a JSON request.
var jsonHeader = http.Header{"Content-Type": {"application/json"}}

// call sends a request and fails the test unless the status is want.
func (d *daemon) call(method, path, body string, want int) []byte {
	d.t.Helper()
	var b []byte
	var hdr http.Header
	if body != "" {
		b, hdr = []byte(body), jsonHeader
	}
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, resp, _, err := d.RoundTrip(ctx, method, path, b, hdr)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	if st != want {
		d.t.Fatalf("%s %s: status %d, want %d; body %.2000s", method, path, st, want, resp)
	}
	return resp
}

// create creates a sandbox from the JSON body and returns its ID.
func (d *daemon) create(body string) string {
	d.t.Helper()
	var sb struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(d.call("POST", "/v1/sandboxes", body, http.StatusCreated), &sb); err != nil || sb.ID == "" {
		d.t.Fatalf("create: %v %+v", err, sb)
	}
	d.Track(sb.ID)
	return sb.ID
}

// createBody is a create request for the test image under TCG with extra
// fields (a JSON fragment without braces, may be empty).
func createBody(t *testing.T, extra string) string {
	img, _ := json.Marshal(testenv.Image(t))
	body := `{"image":` + string(img) + `,"accel":"tcg","boot_timeout_ms":300000`
	if extra != "" {
		body += "," + extra
	}
	return body + "}"
}

// execResult is one attached exec's output.
type execResult struct {
	stdout, stderr []byte
	code           int
	err            string // an error event's code and message
}

// exec runs argv in sandbox ref (POST .../exec, ndjson) and returns what it
// printed and its exit code.
func (d *daemon) exec(ref string, timeout time.Duration, argv ...string) execResult {
	d.t.Helper()
	req, _ := json.Marshal(map[string]any{"cmd": argv, "timeout_ms": timeout.Milliseconds()})
	ctx, cancel := context.WithTimeout(context.Background(), timeout+time.Minute)
	defer cancel()
	st, body, _, err := d.RoundTrip(ctx, "POST", "/v1/sandboxes/"+ref+"/exec", req, jsonHeader)
	if err != nil || st != http.StatusOK {
		d.t.Fatalf("exec %.80q in %s: %d %v %.2000s", argv, ref, st, err, body)
	}
	var r execResult
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Data []byte `json:"data"`
			Exit *struct {
				ExitCode int  `json:"exit_code"`
				TimedOut bool `json:"timed_out"`
			} `json:"exit"`
			Error *struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			d.t.Fatalf("exec event %q: %v", sc.Bytes(), err)
		}
		switch ev.Type {
		case "stdout":
			r.stdout = append(r.stdout, ev.Data...)
		case "stderr":
			r.stderr = append(r.stderr, ev.Data...)
		case "exit":
			r.code = ev.Exit.ExitCode
			if ev.Exit.TimedOut {
				r.err = "timed out"
			}
		case "error":
			r.err = ev.Error.Code + ": " + ev.Error.Message
		}
	}
	return r
}
