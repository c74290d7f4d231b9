// Package isolation is issue 16's isolation suite: what a guest, QEMU's
// user and an API client try, and the exact refusal each gets. See
// tests/README.md ("Isolation suite").
package isolation

// The daemon harness of the suite: the real `agentbox serve` (built once by
// TestMain) with its own socket, state and runtime dirs, raw HTTP over its
// unix socket (the tests spell the wire format themselves), and a cleanup
// that removes every sandbox and asserts nothing is left. A smaller copy
// of tests/e2e's harness (test helpers cannot be imported across
// packages).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// agentboxBin is the binary under test, built by TestMain.
var agentboxBin string

func TestMain(m *testing.M) {
	if openAsHelper() { // qemuuser_test.go: the test binary re-executed as QEMU's user
		return
	}
	dir, err := os.MkdirTemp("", "agentbox-isolation")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentboxBin = filepath.Join(dir, "agentbox")
	build := exec.Command("go", "build", "-o", agentboxBin, "github.com/agentbox/agentbox/cmd/agentbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building agentbox:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requestTimeout bounds every API request (a create boots a TCG guest).
const requestTimeout = 3 * time.Minute

// daemon is one `agentbox serve` under test.
type daemon struct {
	t       *testing.T
	state   string
	runtime string
	sockDir string
	socket  string
	globals []string // global flags before "serve"
	flags   []string // serve flags
	// resolvConf, when set, is bind-mounted over /etc/resolv.conf in a
	// mount namespace of the daemon's own: its upstream resolver is then
	// the test's (guest_test.go's DNS witness).
	resolvConf string
	http       *http.Client
	log        *syncBuffer

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{}
	code int
	ids  map[string]bool
}

// newDaemon prepares a daemon on fresh dirs and registers its cleanup.
func newDaemon(t *testing.T, serveFlags ...string) *daemon {
	t.Helper()
	d := &daemon{
		t: t, state: t.TempDir(), runtime: testenv.ShortTempDir(t), sockDir: testenv.ShortTempDir(t),
		flags: serveFlags, log: &syncBuffer{}, ids: map[string]bool{},
	}
	d.socket = filepath.Join(d.sockDir, "api.sock")
	d.http = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", d.socket)
		},
		DisableCompression: true,
	}}
	t.Cleanup(d.cleanup)
	return d
}

// start runs the daemon and waits until GET /v1/info answers 200.
func (d *daemon) start() {
	d.t.Helper()
	args := []string{"--uri", testenv.URI(), "--state-dir", d.state, "--runtime-dir", d.runtime,
		"--socket", d.socket, "--log-level", "info"}
	args = append(append(append(args, d.globals...), "serve"), d.flags...)
	cmd := exec.Command(agentboxBin, args...)
	if d.resolvConf != "" {
		// unshare and sh exec in place: the PID is the daemon's.
		cmd = exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--",
			"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, d.resolvConf, agentboxBin}, args...)...)
	}
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	fmt.Fprintf(d.log, "=== agentbox %s\n", strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = d.log, d.log
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	done := make(chan struct{})
	d.mu.Lock()
	d.proc, d.done = cmd, done
	d.mu.Unlock()
	go func() {
		cmd.Wait()
		d.mu.Lock()
		d.code = cmd.ProcessState.ExitCode()
		d.mu.Unlock()
		close(done)
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-done:
			d.t.Fatalf("agentbox serve exited with %d before answering; log:\n%s", d.exitCode(), d.log.tail(8000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, _, _, err := d.roundTrip(ctx, "GET", "/v1/info", nil, nil)
		cancel()
		if err == nil && st == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			d.t.Fatalf("agentbox serve did not answer within 2 minutes (last: %d %v); log:\n%s", st, err, d.log.tail(8000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemon) running() bool {
	d.mu.Lock()
	done := d.done
	d.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (d *daemon) exitCode() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.code
}

// terminate sends SIGTERM and returns the exit code.
func (d *daemon) terminate() int {
	d.mu.Lock()
	proc, done := d.proc, d.done
	d.mu.Unlock()
	proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		d.t.Errorf("agentbox serve still runs 2 minutes after SIGTERM: killing it")
		proc.Process.Signal(syscall.SIGKILL)
		<-done
	}
	return d.exitCode()
}

// cleanup removes every sandbox through the daemon, stops it and asserts
// that no domain, qemu process, overlay or socket of it is left.
func (d *daemon) cleanup() {
	t := d.t
	if d.running() {
		var list struct {
			Sandboxes []struct {
				ID string `json:"id"`
			} `json:"sandboxes"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
		st, body, _, err := d.roundTrip(ctx, "GET", "/v1/sandboxes", nil, nil)
		cancel()
		if err != nil || st != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Errorf("cleanup: listing sandboxes: %d %v %s", st, err, body)
		}
		for _, sb := range list.Sandboxes {
			d.track(sb.ID)
			ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
			st, body, _, err := d.roundTrip(ctx, "DELETE", "/v1/sandboxes/"+sb.ID+"?force=true", nil, nil)
			cancel()
			if err != nil || st != http.StatusNoContent {
				t.Errorf("cleanup: DELETE sandbox %s: %d %v %s", sb.ID, st, err, body)
			}
		}
		if code := d.terminate(); code != 0 {
			t.Errorf("cleanup: agentbox serve exited with %d after SIGTERM, want 0", code)
		}
	}
	d.mu.Lock()
	var ids []string
	for id := range d.ids {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	slices.Sort(ids)
	testenv.AssertNoDomains(t, ids, d.state, d.runtime)
	testenv.AssertNoLeaks(t, d.state, d.runtime)
	if t.Failed() {
		t.Logf("daemon log (tail):\n%s", d.log.tail(20000))
	}
}

func (d *daemon) track(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids[id] = true
}

// roundTrip sends one request; path is sent as given (raw query and
// escapes included). hdr may be nil.
func (d *daemon) roundTrip(ctx context.Context, method, path string, body []byte, hdr http.Header) (int, []byte, http.Header, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agentbox"+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
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
	st, resp, _, err := d.roundTrip(ctx, method, path, b, hdr)
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
	d.track(sb.ID)
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
	st, body, _, err := d.roundTrip(ctx, "POST", "/v1/sandboxes/"+ref+"/exec", req, jsonHeader)
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

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) tail(n int) string {
	str := s.String()
	if len(str) > n {
		return "…" + str[len(str)-n:]
	}
	return str
}
