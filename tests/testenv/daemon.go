package testenv

// The daemon harness tests/e2e and tests/isolation share: the real
// `agentbox serve` (built once per test binary) on private dirs, raw HTTP
// over its unix socket, and the teardown that removes every sandbox and
// asserts nothing is left. What each suite adds (typed wire helpers, a
// restart before cleanup, a resolv.conf namespace) stays in its package.

import (
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
)

// RunWithAgentbox builds cmd/agentbox into a fresh temporary directory
// (its name starts with prefix), stores the binary's path in *bin, runs
// the tests and exits with their code after removing the directory. It is
// the whole body of a TestMain; a failed build exits 1 with the compiler's
// output on stderr.
func RunWithAgentbox(m *testing.M, prefix string, bin *string) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = filepath.Join(dir, "agentbox")
	build := exec.Command("go", "build", "-o", *bin, "github.com/agentbox/agentbox/cmd/agentbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building agentbox:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Daemon is one `agentbox serve` under test, restartable on the same dirs.
// NewDaemon makes it; the suite registers its own cleanup, which calls
// Teardown.
type Daemon struct {
	T       testing.TB
	Bin     string   // the agentbox binary
	State   string   // --state-dir
	Runtime string   // --runtime-dir
	SockDir string   // holds the API socket only
	Socket  string   // --socket
	Globals []string // global flags (before "serve") of every start
	Flags   []string // serve flags of every start
	// Command, when set, makes the process of a start from the binary and
	// its arguments (e.g. wrapped in unshare); the process must be the
	// daemon itself (exec in place), since signals go to its PID.
	Command func(bin string, args []string) *exec.Cmd
	HTTP    *http.Client // talks to Socket whatever the URL's host
	Log     *SyncBuffer  // stdout and stderr of every start, in order

	mu   sync.Mutex
	proc *exec.Cmd
	done chan struct{} // closed when proc has exited; then code is set
	code int
	ids  map[string]bool // sandbox IDs the test saw
}

// NewDaemon prepares a daemon of bin with serveFlags on fresh dirs (the
// runtime and socket dirs short, for the unix socket path limit) without
// starting it.
func NewDaemon(t testing.TB, bin string, serveFlags ...string) *Daemon {
	t.Helper()
	d := &Daemon{
		T:       t,
		Bin:     bin,
		State:   t.TempDir(),
		Runtime: ShortTempDir(t),
		SockDir: ShortTempDir(t),
		Flags:   serveFlags,
		Log:     &SyncBuffer{},
		ids:     map[string]bool{},
	}
	d.Socket = filepath.Join(d.SockDir, "api.sock")
	d.HTTP = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var dl net.Dialer
			return dl.DialContext(ctx, "unix", d.Socket)
		},
		DisableCompression: true,
	}}
	return d
}

// ServeArgs is the command line (without the binary) of `agentbox serve`
// for this daemon: libvirt URI, its dirs and socket, Globals, Flags.
func (d *Daemon) ServeArgs() []string {
	args := []string{"--uri", URI(), "--state-dir", d.State, "--runtime-dir", d.Runtime,
		"--socket", d.Socket, "--log-level", "info"}
	args = append(args, d.Globals...)
	args = append(args, "serve")
	return append(args, d.Flags...)
}

// Start runs the daemon (without a config file from the host) and waits
// at most 2 minutes (reconciliation may wait for adopted guests) until
// GET /v1/info answers 200. The error of a daemon that exited or did not
// answer carries the tail of its log; one that did not answer is killed.
func (d *Daemon) Start() error {
	args := d.ServeArgs()
	var cmd *exec.Cmd
	if d.Command != nil {
		cmd = d.Command(d.Bin, args)
	} else {
		cmd = exec.Command(d.Bin, args...)
	}
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	fmt.Fprintf(d.Log, "=== agentbox %s\n", strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = d.Log, d.Log
	if err := cmd.Start(); err != nil {
		return err
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
			return fmt.Errorf("agentbox serve exited with %d before answering; log:\n%s", d.ExitCode(), d.Log.Tail(8000))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		st, _, _, err := d.RoundTrip(ctx, "GET", "/v1/info", nil, nil)
		cancel()
		if err == nil && st == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			d.Kill9()
			return fmt.Errorf("agentbox serve did not answer GET /v1/info within 2 minutes (last: %d %v); log:\n%s", st, err, d.Log.Tail(8000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Started reports whether Start was called.
func (d *Daemon) Started() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done != nil
}

// Running reports whether the daemon process runs.
func (d *Daemon) Running() bool {
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

// ExitCode is the exit code of the last start's process once it exited.
func (d *Daemon) ExitCode() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.code
}

// Kill9 kills the daemon with SIGKILL and waits for it.
func (d *Daemon) Kill9() {
	d.mu.Lock()
	proc, done := d.proc, d.done
	d.mu.Unlock()
	proc.Process.Signal(syscall.SIGKILL)
	<-done
}

// Terminate sends SIGTERM and returns the exit code; a daemon still
// running after 2 minutes is killed and reported as a test error.
func (d *Daemon) Terminate() int {
	d.mu.Lock()
	proc, done := d.proc, d.done
	d.mu.Unlock()
	proc.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		d.T.Errorf("agentbox serve still runs 2 minutes after SIGTERM: killing it")
		d.Kill9()
	}
	return d.ExitCode()
}

// Track records sandbox IDs of this test for the leak checks of Teardown.
func (d *Daemon) Track(ids ...string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, id := range ids {
		d.ids[id] = true
	}
}

// TrackedIDs returns the IDs Track recorded, sorted.
func (d *Daemon) TrackedIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ids []string
	for id := range d.ids {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Teardown removes every sandbox through a running daemon
// (DELETE ?force=true, each request bounded by timeout), stops it with
// SIGTERM expecting exit code 0, and asserts that no domain, qemu
// process, overlay or socket of it is left. Failures are test errors.
func (d *Daemon) Teardown(timeout time.Duration) {
	t := d.T
	if d.Running() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		st, body, _, err := d.RoundTrip(ctx, "GET", "/v1/sandboxes", nil, nil)
		cancel()
		var list struct {
			Sandboxes []struct {
				ID    string `json:"id"`
				State string `json:"state"`
			} `json:"sandboxes"`
		}
		if err != nil || st != http.StatusOK || json.Unmarshal(body, &list) != nil {
			t.Errorf("cleanup: listing sandboxes: %d %v %s", st, err, body)
		}
		for _, sb := range list.Sandboxes {
			d.Track(sb.ID)
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			st, body, _, err := d.RoundTrip(ctx, "DELETE", "/v1/sandboxes/"+sb.ID+"?force=true", nil, nil)
			cancel()
			if err != nil || st != http.StatusNoContent {
				t.Errorf("cleanup: DELETE sandbox %s (%s): %d %v %s", sb.ID, sb.State, st, err, body)
			}
		}
		if code := d.Terminate(); code != 0 {
			t.Errorf("cleanup: agentbox serve exited with %d after SIGTERM, want 0", code)
		}
	}
	AssertNoDomains(t, d.TrackedIDs(), d.State, d.Runtime)
	AssertNoLeaks(t, d.State, d.Runtime)
}

// RoundTrip sends one request to the daemon's unix socket and returns the
// status, the whole body and the headers. path may carry a raw query and
// percent-escapes; it is sent as given. body and hdr may be nil.
func (d *Daemon) RoundTrip(ctx context.Context, method, path string, body []byte, hdr http.Header) (int, []byte, http.Header, error) {
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
	resp, err := d.HTTP.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header, err
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a daemon's
// stdout and stderr) and readers.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Tail returns the last n bytes written, led by "…" when cut.
func (s *SyncBuffer) Tail(n int) string {
	str := s.String()
	if len(str) > n {
		return "…" + str[len(str)-n:]
	}
	return str
}
