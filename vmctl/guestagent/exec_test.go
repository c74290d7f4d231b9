package guestagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

func TestExecEcho(t *testing.T) {
	c, _ := newClient(t)
	r := run(t, c, argv("echo", "hello", "world"), nil)
	if r.err != nil || r.status != (agentproto.ExitStatus{Code: 0}) || r.stdout != "hello world\n" || r.stderr != "" {
		t.Fatalf("got %+v", r)
	}
}

func TestExecExitCodes(t *testing.T) {
	c, _ := newClient(t)
	for _, code := range []int{0, 1, 42} {
		r := run(t, c, argv("sh", "-c", "exit "+strconv.Itoa(code)), nil)
		if r.err != nil || r.status != (agentproto.ExitStatus{Code: code}) {
			t.Errorf("exit %d: got %+v", code, r)
		}
	}
}

func TestExecKilledBySignal(t *testing.T) {
	c, _ := newClient(t)
	r := run(t, c, argv("sh", "-c", "kill -9 $$"), nil)
	if r.err != nil || r.status != (agentproto.ExitStatus{Code: -1, Signal: 9}) || r.status.ShellCode() != 137 {
		t.Fatalf("got %+v", r)
	}
}

func TestExecStdoutStderrSeparate(t *testing.T) {
	c, _ := newClient(t)
	r := run(t, c, argv("sh", "-c", "printf out1; printf err1 >&2; printf out2; printf err2 >&2"), nil)
	if r.err != nil || r.stdout != "out1out2" || r.stderr != "err1err2" {
		t.Fatalf("got %+v", r)
	}
}

func TestExecStdin(t *testing.T) {
	c, _ := newClient(t)
	in := []byte("line one\nline two\x00\xff\xfe tail")
	r := run(t, c, argv("cat"), in)
	if r.err != nil || r.stdout != string(in) {
		t.Fatalf("got %+v", r)
	}
	// No stdin attached: /dev/null, so cat ends at once.
	r = run(t, c, argv("cat"), nil)
	if r.err != nil || r.stdout != "" || r.status.Code != 0 {
		t.Fatalf("without stdin: got %+v", r)
	}
}

func TestExecEnvAndDir(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	req := argv("sh", "-c", `printf '%s|%s|%s|%s' "$FOO" "$PWD" "$PATH" "$HOME"`)
	req.Env = []string{"FOO=bar baz", "HOME=/home/x"}
	req.Dir = dir
	r := run(t, c, req, nil)
	want := "bar baz|" + dir + "|" + agentproto.DefaultPath + "|/home/x"
	if r.err != nil || r.stdout != want {
		t.Fatalf("got %q, want %q (%+v)", r.stdout, want, r)
	}
}

func TestExecArgvExact(t *testing.T) {
	c, _ := newClient(t)
	args := []string{"a b", "'single'", `"double"`, "line1\nline2", "ünïcødé 😀", "", "$HOME", `\back\slash`, "*", ";rm -rf /"}
	req := argv(append([]string{"sh", "-c", `for a; do printf '%s\0' "$a"; done`, "sh"}, args...)...)
	r := run(t, c, req, nil)
	got := strings.Split(strings.TrimSuffix(r.stdout, "\x00"), "\x00")
	if r.err != nil || len(got) != len(args) {
		t.Fatalf("got %q (%+v)", got, r)
	}
	for i := range args {
		if got[i] != args[i] {
			t.Errorf("arg %d: got %q, want %q", i, got[i], args[i])
		}
	}
}

func TestExecTimeoutKillsProcessGroup(t *testing.T) {
	c, _ := newClient(t)
	req := argv("sh", "-c", "sleep 1000 & echo $!; wait")
	req.TimeoutMs = 300
	r := run(t, c, req, nil)
	if r.err != nil || r.status != (agentproto.ExitStatus{Code: -1, Signal: 9, TimedOut: true}) {
		t.Fatalf("got %+v", r)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(r.stdout))
	if err != nil {
		t.Fatalf("background pid %q: %v", r.stdout, err)
	}
	waitGone(t, pid)
}

func TestExecBackgroundChildDoesNotHold(t *testing.T) {
	c, _ := newClient(t)
	start := time.Now()
	r := run(t, c, argv("sh", "-c", "sleep 1000 & echo $!"), nil)
	if r.err != nil || r.status.Code != 0 {
		t.Fatalf("got %+v", r)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(r.stdout))
	if pid <= 0 {
		t.Fatalf("pid %q", r.stdout)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("exec took %v: blocked on the background child's pipe", d)
	}
	// The child survives a normal exit (it may be a daemon); clean it up.
	syscall.Kill(pid, syscall.SIGKILL)
	waitGone(t, pid)
}

func TestExecBinaryStdinToStdout10MiB(t *testing.T) {
	c, _ := newClient(t)
	in := make([]byte, 10<<20)
	rand.Read(in)
	ctx := context.Background()
	h := sha256.New()
	var n countWriter
	st, err := c.Exec(ctx, argv("cat"), bytes.NewReader(in), io.MultiWriter(h, &n), nil)
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %+v %v", st, err)
	}
	if want := sha256.Sum256(in); !bytes.Equal(h.Sum(nil), want[:]) || n.n != int64(len(in)) {
		t.Fatalf("output differs: %d bytes", n.n)
	}
}

func TestExecConcurrentStdoutStderr5MiB(t *testing.T) {
	c, _ := newClient(t)
	data := make([]byte, 5<<20)
	rand.Read(data)
	f := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(f, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Both writers run at once: an agent that drained one pipe after the
	// other would deadlock here.
	r := run(t, c, argv("sh", "-c", `cat "$0" & cat "$0" >&2; wait`, f), nil)
	if r.err != nil || r.status.Code != 0 {
		t.Fatalf("got %+v", r.status)
	}
	if r.stdout != string(data) || r.stderr != string(data) {
		t.Fatalf("stdout %d bytes, stderr %d bytes, want %d each, identical", len(r.stdout), len(r.stderr), len(data))
	}
}

func TestExecBinaryOutputIntact(t *testing.T) {
	c, _ := newClient(t)
	r := run(t, c, argv("printf", `\000\377\376abc\300\000`), nil)
	if r.err != nil || r.stdout != "\x00\xff\xfeabc\xc0\x00" {
		t.Fatalf("got %q", r.stdout)
	}
}

func TestTwoExecsAtOnce(t *testing.T) {
	c, _ := newClient(t)
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The reader blocks until the writer runs: both must be in flight.
	var wg sync.WaitGroup
	var reader, writer result
	wg.Add(2)
	go func() { defer wg.Done(); reader = run(t, c, argv("cat", fifo), nil) }()
	go func() { defer wg.Done(); writer = run(t, c, argv("sh", "-c", `echo through > "$0"`, fifo), nil) }()
	wg.Wait()
	if reader.err != nil || reader.stdout != "through\n" || writer.err != nil || writer.status.Code != 0 {
		t.Fatalf("reader %+v writer %+v", reader, writer)
	}
}

func TestExecStartErrors(t *testing.T) {
	c, _ := newClient(t)
	dir := t.TempDir()
	noexec := filepath.Join(dir, "noexec")
	os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644)
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte{0x7f, 'E', 'L', 'F', 0, 0, 0}, 0o755)
	cases := []struct {
		req   agentproto.ExecRequest
		kind  agentproto.ExecErrorKind
		msg   string
		shell int
	}{
		{argv("python4", "-c", "1"), agentproto.ExecNotFound, "python4: command not found", 127},
		{argv("/nonexistent/bin"), agentproto.ExecNotFound, "/nonexistent/bin: no such file or directory", 127},
		{argv(noexec), agentproto.ExecPermission, noexec + ": permission denied", 126},
		{argv(garbage), agentproto.ExecNotExecutable, garbage + ": exec format error", 126},
		{agentproto.ExecRequest{Argv: []string{"noexec"}, Env: []string{"PATH=" + dir}}, agentproto.ExecPermission, "noexec: permission denied", 126},
		{agentproto.ExecRequest{Argv: []string{"true"}, Dir: "/nonexistent"}, agentproto.ExecBadWorkdir, "working directory /nonexistent: no such file or directory", 126},
	}
	for _, tc := range cases {
		r := run(t, c, tc.req, nil)
		want := agentproto.ExitStatus{Code: -1, ErrorKind: tc.kind, Error: tc.msg}
		var ee *agentproto.ExecError
		if r.status != want || !errors.As(r.err, &ee) || ee.Kind != tc.kind || r.status.ShellCode() != tc.shell {
			t.Errorf("%q: got %+v / %v, want %+v", tc.req.Argv, r.status, r.err, want)
		}
	}
	if !errors.Is(run(t, c, argv("python4"), nil).err, fs.ErrNotExist) {
		t.Error("not-found is not fs.ErrNotExist")
	}
}

func TestExecCancelKillsCommand(t *testing.T) {
	c, _ := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := c.Start(ctx, argv("sleep", "1000"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	st, err := p.Wait()
	if !errors.Is(err, context.Canceled) || st != (agentproto.ExitStatus{Code: -1, Signal: 9}) {
		t.Fatalf("got %+v %v", st, err)
	}
	waitGone(t, p.Pid())
}

func TestProcessSignal(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	// stdin attached but never fed: Signal must not depend on the exec
	// stream.
	pr, pw := io.Pipe()
	defer pw.Close()
	p, err := c.Start(ctx, argv("sleep", "1000"), pr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(ctx, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait()
	if err != nil || st != (agentproto.ExitStatus{Code: -1, Signal: int(syscall.SIGTERM)}) {
		t.Fatalf("got %+v %v", st, err)
	}
	if err := p.Signal(ctx, syscall.SIGTERM); !errors.Is(err, agent.ErrProcessDone) {
		t.Fatalf("signal after exit: %v", err)
	}
}

func TestHostDisconnectKillsCommand(t *testing.T) {
	c, ta := newClient(t)
	p, err := c.Start(context.Background(), argv("sleep", "1000"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ta.host.Close()
	if _, err := p.Wait(); !errors.Is(err, agent.ErrDisconnected) {
		t.Fatalf("Wait after disconnect: %v", err)
	}
	waitGone(t, p.Pid())
	if _, err := c.Ping(context.Background()); !errors.Is(err, agent.ErrDisconnected) {
		t.Fatalf("Ping after disconnect: %v", err)
	}
}

func TestNoZombies(t *testing.T) {
	c, _ := newClient(t)
	const total, workers = 1000, 8
	var wg sync.WaitGroup
	errs := make(chan string, total)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				// The background subshell outlives sh and is orphaned.
				r := run(t, c, argv("sh", "-c", "(exit 3) & exit 7"), nil)
				if r.err != nil || r.status.Code != 7 {
					errs <- fmt.Sprintf("%+v %v", r.status, r.err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("exec failed: %s", e)
	}
	testenv.WaitFor(t, 20*time.Second, "no children left", func() bool { return len(children(t)) == 0 })
}

// TestExecStreamsConstantMemory streams 256 MiB of output and checks that
// neither side buffers it.
func TestExecStreamsConstantMemory(t *testing.T) {
	c, _ := newClient(t)
	const size = 256 << 20
	var w memWriter
	st, err := c.Exec(context.Background(), argv("head", "-c", strconv.Itoa(size), "/dev/zero"), nil, &w, nil)
	if err != nil || st.Code != 0 || w.n != size {
		t.Fatalf("got %+v %v, %d bytes", st, err, w.n)
	}
	if w.maxHeap > 128<<20 {
		t.Fatalf("heap grew to %d MiB while streaming", w.maxHeap>>20)
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// memWriter counts bytes and samples the heap every 16 MiB.
type memWriter struct {
	n, next int64
	maxHeap uint64
}

func (w *memWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	if w.n >= w.next {
		w.next = w.n + 16<<20
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		w.maxHeap = max(w.maxHeap, ms.HeapInuse)
	}
	return len(p), nil
}
