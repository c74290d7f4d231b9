package client_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// guard is how long a test waits for something that must happen before it
// calls it a hang (a deadlock guard, not a speed assertion).
const guard = time.Minute

// socketDir is a temp dir short enough for unix socket paths.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// start serves b on a unix socket and returns a client of it.
func start(t *testing.T, b *backendtest.Fake) *client.Client {
	t.Helper()
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(socketDir(t), "a.sock")
	l, err := apiserver.ListenUnix(sock, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	c := client.New(sock)
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c
}

// TestRoundTrips calls every method once and checks what reached the
// backend and what came back.
func TestRoundTrips(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]any{}
	put := func(k string, v any) { mu.Lock(); got[k] = v; mu.Unlock() }
	sp := func(vs ...any) string { return strings.TrimSuffix(fmt.Sprintln(vs...), "\n") }
	b := &backendtest.Fake{
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			put("create", req)
			put("caller", api.CallerFrom(ctx).ID)
			return backendtest.Sandbox(backendtest.SandboxID), nil
		},
		ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
			put("list", sp(labels, state))
			return []api.Sandbox{backendtest.Sandbox("aaaaaaaaaaaa"), backendtest.Sandbox("bbbbbbbbbbbb")}, nil
		},
		DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
			put("delete", sp(ref, force))
			return nil
		},
		ConsoleFn: func(ctx context.Context, ref string, tail int64, w io.Writer) error {
			fmt.Fprintf(w, "console of %s tail %d\n", ref, tail)
			return nil
		},
		ProcessOutputFn: func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
			put("output", sp(ref, pid, offset, follow))
			emit(api.ExecEvent{Type: api.EventStdout, Data: []byte("o"), Offset: offset})
			return emit(api.ExecEvent{Type: api.EventStderr, Data: []byte("e"), Offset: offset + 1})
		},
		KillProcessFn: func(ctx context.Context, ref, pid, signal string) error {
			put("kill", ref+" "+pid+" "+signal)
			return nil
		},
		MkdirFn: func(ctx context.Context, ref string, req api.MkdirRequest) error { put("mkdir", req); return nil },
		RemoveFileFn: func(ctx context.Context, ref, path string, recursive bool) error {
			put("rm", sp(ref, path, recursive))
			return nil
		},
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			path, perm, parents := req.Path, req.Mode, req.Parents
			data, _ := io.ReadAll(r)
			put("upload", sp(ref, path, perm, parents, string(data)))
			return backendtest.File(path, int64(len(data))), nil
		},
		WriteStdinFn: func(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
			data, _ := io.ReadAll(r)
			put("stdin", sp(ref, pid, closeAfter, string(data)))
			return int64(len(data)), nil
		},
	}
	c := start(t, b)

	info, err := c.Info(ctx)
	if err != nil || info.Version != "test" || info.Capacity.VCPUs != 8 || info.Sandboxes[api.StateRunning] != 1 {
		t.Errorf("Info = %+v, %v", info, err)
	}
	req := api.CreateSandboxRequest{Image: "/img", Name: "w1", VCPUs: 2, Labels: map[string]string{"a": "b"}, Limits: api.Limits{TTLSeconds: 9}}
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil || !reflect.DeepEqual(sb, backendtest.Sandbox(backendtest.SandboxID)) {
		t.Errorf("CreateSandbox = %+v, %v", sb, err)
	}
	if !reflect.DeepEqual(got["create"], req) {
		t.Errorf("backend got %+v, want %+v", got["create"], req)
	}
	if want := fmt.Sprintf("uid:%d", os.Getuid()); got["caller"] != want {
		t.Errorf("caller %v, want %s", got["caller"], want)
	}
	list, err := c.ListSandboxes(ctx, map[string]string{"team": "a", "x": "y=z"}, api.StateRunning)
	if err != nil || len(list) != 2 || list[1].ID != "bbbbbbbbbbbb" || got["list"] != "map[team:a x:y=z] running" {
		t.Errorf("ListSandboxes = %+v, %v; backend got %v", list, err, got["list"])
	}
	if sb, err := c.GetSandbox(ctx, "w1"); err != nil || sb.ID != backendtest.SandboxID {
		t.Errorf("GetSandbox = %+v, %v", sb, err)
	}
	if sb, err := c.StopSandbox(ctx, "w1"); err != nil || sb.State != api.StateStopped {
		t.Errorf("StopSandbox = %+v, %v", sb, err)
	}
	if err := c.DeleteSandbox(ctx, "w1", true); err != nil || got["delete"] != "w1 true" {
		t.Errorf("DeleteSandbox: %v; backend got %v", err, got["delete"])
	}
	var out bytes.Buffer
	if err := c.Console(ctx, "w1", 50, &out); err != nil || out.String() != "console of w1 tail 50\n" {
		t.Errorf("Console: %q, %v", out.String(), err)
	}

	var stdout, stderr bytes.Buffer
	st, err := c.Exec(ctx, "w1", api.ExecRequest{Cmd: []string{"true"}}, &stdout, &stderr)
	if err != nil || st.ExitCode != 0 || st.DurationMs != 5 || stdout.String() != "out\n" || stderr.String() != "err\n" {
		t.Errorf("Exec = %+v, %v; %q %q", st, err, stdout.String(), stderr.String())
	}
	if _, err := c.Exec(ctx, "w1", api.ExecRequest{Cmd: []string{"true"}}, nil, nil); err != nil {
		t.Errorf("Exec with nil writers: %v", err)
	}
	p, err := c.StartProcess(ctx, "w1", api.ExecRequest{Cmd: []string{"sleep", "9"}, StdinOpen: true})
	if err != nil || p.ID != "p1" || !reflect.DeepEqual(p.Cmd, []string{"sleep", "9"}) {
		t.Errorf("StartProcess = %+v, %v", p, err)
	}
	if ps, err := c.ListProcesses(ctx, "w1"); err != nil || len(ps) != 1 {
		t.Errorf("ListProcesses = %+v, %v", ps, err)
	}
	if p, err := c.GetProcess(ctx, "w1", "p7"); err != nil || p.ID != "p7" {
		t.Errorf("GetProcess = %+v, %v", p, err)
	}
	stdout.Reset()
	stderr.Reset()
	exit, err := c.ProcessOutput(ctx, "w1", "p1", 12, true, &stdout, &stderr)
	if err != nil || exit != nil || stdout.String() != "o" || stderr.String() != "e" || got["output"] != "w1 p1 12 true" {
		t.Errorf("ProcessOutput = %v, %v; %q %q; backend %v", exit, err, stdout.String(), stderr.String(), got["output"])
	}
	if n, err := c.WriteStdin(ctx, "w1", "p1", strings.NewReader("input"), true); err != nil || n != 5 || got["stdin"] != "w1 p1 true input" {
		t.Errorf("WriteStdin = %d, %v; backend %v", n, err, got["stdin"])
	}
	if err := c.KillProcess(ctx, "w1", "p1", "TERM"); err != nil || got["kill"] != "w1 p1 TERM" {
		t.Errorf("KillProcess: %v; backend %v", err, got["kill"])
	}

	fi, err := c.Upload(ctx, "w1", "/work/x", strings.NewReader("abc"), 0o755|fs.ModeSetuid, true)
	if err != nil || fi.Size != 3 || got["upload"] != "w1 /work/x urwxr-xr-x true abc" {
		t.Errorf("Upload = %+v, %v; backend %v", fi, err, got["upload"])
	}
	if _, err := c.Upload(ctx, "w1", "/work/y", strings.NewReader(""), 0, false); err != nil || got["upload"] != "w1 /work/y -rw-r--r-- false " {
		t.Errorf("Upload with mode 0: %v; backend %v", err, got["upload"])
	}
	out.Reset()
	fi, err = c.Download(ctx, "w1", "/work//f.txt", &out)
	want := backendtest.File("/work/f.txt", 7)
	if err != nil || out.String() != "content" || fi.Size != 7 || fi.Mode != "0644" || fi.Name != "f.txt" || fi.Path != "/work/f.txt" || !fi.ModTime.Equal(want.ModTime) || fi.Type != api.FileRegular {
		t.Errorf("Download = %+v, %v; %q", fi, err, out.String())
	}
	if fi, err := c.Stat(ctx, "w1", "/etc/hostname"); err != nil || fi.Path != "/etc/hostname" {
		t.Errorf("Stat = %+v, %v", fi, err)
	}
	if fs, err := c.List(ctx, "w1", "/work"); err != nil || len(fs) != 2 || fs[1].Path != "/work/b" {
		t.Errorf("List = %+v, %v", fs, err)
	}
	mk := api.MkdirRequest{Path: "/work/d", Mode: "0700", Parents: true}
	if err := c.Mkdir(ctx, "w1", mk); err != nil || !reflect.DeepEqual(got["mkdir"], mk) {
		t.Errorf("Mkdir: %v; backend %v", err, got["mkdir"])
	}
	if err := c.RemoveFile(ctx, "w1", "/work/d", true); err != nil || got["rm"] != "w1 /work/d true" {
		t.Errorf("RemoveFile: %v; backend %v", err, got["rm"])
	}

	var entries []audit.Entry
	if err := c.Audit(ctx, "", func(e audit.Entry) error { entries = append(entries, e); return nil }); err != nil || len(entries) != 1 || entries[0].Action != audit.ActionExec {
		t.Errorf("Audit = %+v, %v", entries, err)
	}
	if err := c.Audit(ctx, "w1", func(e audit.Entry) error { return nil }); err != nil {
		t.Errorf("Audit(w1): %v", err)
	}
	calls := strings.Join(b.Calls(), ",")
	if !strings.Contains(calls, "Audit ,") || !strings.HasSuffix(calls, "Audit w1") {
		t.Errorf("audit calls %s", calls)
	}
}

func TestErrorsAreAPIErrors(t *testing.T) {
	capErr := api.Errorf(429, api.CodeCapacity, "not enough memory: free some")
	capErr.Details = map[string]any{"free_memory_mib": 256}
	b := &backendtest.Fake{
		CreateSandboxFn: func(context.Context, api.CreateSandboxRequest) (api.Sandbox, error) { return api.Sandbox{}, capErr },
		GetSandboxFn: func(ctx context.Context, ref string) (api.Sandbox, error) {
			return api.Sandbox{}, api.Errorf(404, api.CodeNotFound, "no sandbox %q: list them with agentbox ls", ref)
		},
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			if ref == "stopped" {
				return api.ExitStatus{}, api.Errorf(409, api.CodeNotRunning, "sandbox stopped")
			}
			started("e1", 1)
			stdout.Write([]byte("half"))
			return api.ExitStatus{}, api.Errorf(503, api.CodeGuestDied, "guest died")
		},
		ProcessOutputFn: func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
			return api.Errorf(410, api.CodeOutputDropped, "offset %d dropped", offset)
		},
	}
	c := start(t, b)
	ctx := context.Background()
	check := func(what string, err error, status int, code, msg string) {
		t.Helper()
		var e *api.Error
		if !errors.As(err, &e) || e.Status != status || e.Code != code || !strings.Contains(e.Message, msg) {
			t.Errorf("%s: error %#v, want %d %s %q", what, err, status, code, msg)
		}
	}
	_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "/i"})
	check("create", err, 429, api.CodeCapacity, "not enough memory")
	var e *api.Error
	if errors.As(err, &e) && e.Details["free_memory_mib"] != float64(256) {
		t.Errorf("details %v", e.Details)
	}
	_, err = c.GetSandbox(ctx, "nope")
	check("get", err, 404, api.CodeNotFound, `no sandbox "nope"`)
	if !errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("get: %v does not match errdefs.ErrNotFound alone", err)
	}
	_, err = c.GetSandbox(ctx, "a/b")
	check("get a/b", err, 400, api.CodeInvalidArgument, "neither an ID")
	_, err = c.GetSandbox(ctx, "..")
	check("get ..", err, 400, api.CodeInvalidArgument, "")
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	check("create without image", err, 400, api.CodeInvalidArgument, "image is missing")
	_, err = c.Exec(ctx, "stopped", api.ExecRequest{Cmd: []string{"x"}}, nil, nil)
	check("exec stopped", err, 409, api.CodeNotRunning, "sandbox stopped")
	var out bytes.Buffer
	_, err = c.Exec(ctx, "w", api.ExecRequest{Cmd: []string{"x"}}, &out, nil)
	check("exec guest died", err, 503, api.CodeGuestDied, "guest died")
	if out.String() != "half" {
		t.Errorf("output before the error %q", out.String())
	}
	_, err = c.ProcessOutput(ctx, "w", "p1", 5, false, nil, nil)
	check("output", err, 410, api.CodeOutputDropped, "offset 5 dropped")
	_, err = c.Upload(ctx, "w", "relative", strings.NewReader("x"), 0, false)
	check("upload relative", err, 400, api.CodeInvalidArgument, "relative")
}

// TestExecStreamsMiBsByteExact: several MiB of stdout and stderr, in
// writes of odd sizes, arrive byte-exact and in order per stream.
func TestExecStreamsMiBsByteExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	wantOut := make([]byte, 5<<20+17)
	wantErr := make([]byte, 1<<20+3)
	for i := range wantOut {
		wantOut[i] = byte(rng.Uint32())
	}
	for i := range wantErr {
		wantErr[i] = byte(rng.Uint32())
	}
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		o, e := wantOut, wantErr
		sizes := rand.New(rand.NewPCG(3, 4))
		for len(o) > 0 || len(e) > 0 {
			n := min(len(o), 1+sizes.IntN(200<<10))
			if _, err := stdout.Write(o[:n]); err != nil {
				return api.ExitStatus{}, err
			}
			o = o[n:]
			n = min(len(e), 1+sizes.IntN(50<<10))
			if _, err := stderr.Write(e[:n]); err != nil {
				return api.ExitStatus{}, err
			}
			e = e[n:]
		}
		return api.ExitStatus{ExitCode: 7, DurationMs: 42}, nil
	}}
	c := start(t, b)
	var stdout, stderr bytes.Buffer
	st, err := c.Exec(context.Background(), "w", api.ExecRequest{Cmd: []string{"x"}}, &stdout, &stderr)
	if err != nil || st.ExitCode != 7 || st.DurationMs != 42 {
		t.Fatalf("Exec = %+v, %v", st, err)
	}
	if !bytes.Equal(stdout.Bytes(), wantOut) || !bytes.Equal(stderr.Bytes(), wantErr) {
		t.Errorf("output differs: stdout %d/%d bytes, stderr %d/%d bytes", stdout.Len(), len(wantOut), stderr.Len(), len(wantErr))
	}
}

// cancelWriter cancels a context at its first write.
type cancelWriter struct {
	once   sync.Once
	cancel context.CancelFunc
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	w.once.Do(w.cancel)
	return len(p), nil
}

func TestExecCancelReachesTheBackend(t *testing.T) {
	backendDone := make(chan error, 1)
	b := &backendtest.Fake{ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started("e1", 1)
		stdout.Write([]byte("running"))
		<-ctx.Done() // the real backend kills the command here
		backendDone <- ctx.Err()
		return api.ExitStatus{}, ctx.Err()
	}}
	c := start(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := c.Exec(ctx, "w", api.ExecRequest{Cmd: []string{"sleep", "1000"}}, &cancelWriter{cancel: cancel}, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Exec = %v, want context.Canceled", err)
	}
	if err := testenv.Receive(t, guard, "the backend's context to end", backendDone); !errors.Is(err, context.Canceled) {
		t.Errorf("backend ctx: %v", err)
	}
}

// stream is a deterministic pseudo-random byte stream of n bytes that
// hashes what it produces; after gateAt bytes it waits for gate (if set)
// before producing more.
type stream struct {
	rng    *rand.ChaCha8
	left   int64
	made   int64
	gateAt int64
	gate   <-chan struct{}
	h      interface {
		io.Writer
		Sum([]byte) []byte
	}
}

func newStream(n, gateAt int64, gate <-chan struct{}) *stream {
	return &stream{rng: rand.NewChaCha8([32]byte{1}), left: n, gateAt: gateAt, gate: gate, h: sha256.New()}
}

func (s *stream) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if s.gate != nil && s.made >= s.gateAt {
		select {
		case <-s.gate:
			s.gate = nil
		case <-time.After(guard):
			return 0, fmt.Errorf("not streamed: the other side got nothing after %d bytes were produced", s.made)
		}
	}
	n := min(int64(len(p)), s.left, 256<<10)
	s.rng.Read(p[:n])
	s.h.Write(p[:n])
	s.left -= n
	s.made += n
	return int(n), nil
}

// counter hashes and counts what it is written, closing reached once it
// has seen at least at bytes.
type counter struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	n       int64
	at      int64
	reached chan struct{}
}

func newCounter(at int64) *counter {
	return &counter{h: sha256.New(), at: at, reached: make(chan struct{})}
}

func (c *counter) Write(p []byte) (int, error) {
	c.h.Write(p)
	before := c.n
	c.n += int64(len(p))
	if before < c.at && c.n >= c.at {
		close(c.reached)
	}
	return len(p), nil
}

// TestUploadDownloadStreamed: 50 MiB go up and down byte-exact, and
// streamed: the producer pauses after 8 MiB until the consumer has seen
// 1 MiB, which cannot happen if anything in between held the whole body.
func TestUploadDownloadStreamed(t *testing.T) {
	const size = 50 << 20
	const gateAt, seen = 8 << 20, 1 << 20
	uploaded := newCounter(seen)
	download := make(chan struct{}) // closed when the client has seen `seen` bytes
	b := &backendtest.Fake{
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			path := req.Path
			n, err := io.Copy(uploaded, r)
			if err != nil {
				return api.FileInfo{}, err
			}
			return backendtest.File(path, n), nil
		},
		DownloadFn: func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
			src := newStream(size, gateAt, download)
			_, err := io.Copy(open(backendtest.File(path, size)), src)
			return err
		},
	}
	c := start(t, b)
	ctx := context.Background()

	up := newStream(size, gateAt, uploaded.reached)
	fi, err := c.Upload(ctx, "w", "/big", up, 0o600, false)
	if err != nil || fi.Size != size {
		t.Fatalf("Upload = %+v, %v", fi, err)
	}
	if uploaded.n != size || !bytes.Equal(uploaded.h.Sum(nil), up.h.Sum(nil)) {
		t.Errorf("upload: backend got %d bytes, sha256 differs = %v", uploaded.n, !bytes.Equal(uploaded.h.Sum(nil), up.h.Sum(nil)))
	}

	got := newCounter(seen)
	go func() { <-got.reached; close(download) }()
	fi, err = c.Download(ctx, "w", "/big", got)
	if err != nil || fi.Size != size || got.n != size {
		t.Fatalf("Download = %+v, %v; got %d bytes", fi, err, got.n)
	}
	want := newStream(size, 0, nil)
	io.Copy(io.Discard, want)
	if !bytes.Equal(got.h.Sum(nil), want.h.Sum(nil)) {
		t.Error("download: sha256 differs")
	}
}

// TestStdinStreamed: stdin is streamed the same way.
func TestStdinStreamed(t *testing.T) {
	const size = 20 << 20
	got := newCounter(1 << 20)
	b := &backendtest.Fake{WriteStdinFn: func(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
		return io.Copy(got, r)
	}}
	c := start(t, b)
	src := newStream(size, 4<<20, got.reached)
	n, err := c.WriteStdin(context.Background(), "w", "p1", src, false)
	if err != nil || n != size || !bytes.Equal(got.h.Sum(nil), src.h.Sum(nil)) {
		t.Errorf("WriteStdin = %d, %v; sha256 equal = %v", n, err, bytes.Equal(got.h.Sum(nil), src.h.Sum(nil)))
	}
}

func TestProcessOutputExit(t *testing.T) {
	c := start(t, &backendtest.Fake{})
	var out bytes.Buffer
	exit, err := c.ProcessOutput(context.Background(), "w", "p1", 0, false, &out, nil)
	if err != nil || exit == nil || exit.ExitCode != 0 || exit.DurationMs != 9 || out.String() != "hello" {
		t.Errorf("ProcessOutput = %+v, %v, %q", exit, err, out.String())
	}
}

func TestEvents(t *testing.T) {
	c := start(t, &backendtest.Fake{EventsFn: func(ctx context.Context, emit func(api.Event) error) error {
		for i := range 3 {
			if err := emit(api.Event{Time: backendtest.Epoch, Type: api.EventSandboxState, Sandbox: fmt.Sprintf("%012d", i)}); err != nil {
				return err
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}})
	var got []string
	stop := errors.New("enough")
	err := c.Events(context.Background(), func(e api.Event) error {
		got = append(got, e.Sandbox)
		if len(got) == 2 {
			return stop
		}
		return nil
	})
	if err != stop || fmt.Sprint(got) != "[000000000000 000000000001]" {
		t.Errorf("Events = %v, %v", err, got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	err = c.Events(ctx, func(api.Event) error { cancel(); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Events after cancel = %v, want context.Canceled", err)
	}
}

// rawServer serves h on a unix socket, for answers the real server never
// gives.
func rawServer(t *testing.T, h http.HandlerFunc) *client.Client {
	t.Helper()
	sock := filepath.Join(socketDir(t), "raw.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return client.New(sock)
}

func TestExecStreamWithoutExit(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeNDJSON)
		io.WriteString(w, `{"type":"started","exec_id":"e1","pid":1}`+"\n"+`{"type":"stdout","data":"aGk="}`+"\n")
	})
	var out bytes.Buffer
	_, err := c.Exec(context.Background(), "w", api.ExecRequest{Cmd: []string{"x"}}, &out, nil)
	if err == nil || err.Error() != "daemon closed the exec stream before the command's exit status" || out.String() != "hi" {
		t.Errorf("Exec = %v, %q", err, out.String())
	}
}

func TestNonJSONErrorAnswer(t *testing.T) {
	c := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	})
	_, err := c.Info(context.Background())
	var e *api.Error
	if !errors.As(err, &e) || e.Status != 502 || e.Code != api.CodeInternal || !strings.Contains(e.Message, "502 Bad Gateway: upstream down") {
		t.Errorf("Info = %#v", err)
	}
}

func TestUnreachable(t *testing.T) {
	dir := socketDir(t)
	missing := filepath.Join(dir, "missing.sock")
	_, err := client.New(missing).Info(context.Background())
	if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing socket: %v", err)
	}
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	_, err = client.New(stale).Info(context.Background())
	if !errors.Is(err, client.ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("stale socket: %v", err)
	}
	// A daemon that answers with an error is not unreachable.
	c := start(t, &backendtest.Fake{GetSandboxFn: func(context.Context, string) (api.Sandbox, error) {
		return api.Sandbox{}, api.Errorf(404, api.CodeNotFound, "no")
	}})
	if _, err := c.GetSandbox(context.Background(), "x"); errors.Is(err, client.ErrUnreachable) {
		t.Errorf("404 is ErrUnreachable: %v", err)
	}
	// A closed TCP port is unreachable too.
	tl, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := tl.Addr().String()
	tl.Close()
	tc, err := client.NewTCP("http://" + addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tc.Info(context.Background()); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("closed TCP port: %v", err)
	}
}

func TestTCPToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	base := "http://" + l.Addr().String()
	for _, opts := range [][]client.Option{nil, {client.WithToken("wrong-token-wrong-token")}} {
		c, err := client.NewTCP(base, opts...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Info(context.Background())
		var e *api.Error
		if !errors.As(err, &e) || e.Status != 401 || e.Code != api.CodeUnauthorized {
			t.Errorf("Info with %d options: %v", len(opts), err)
		}
		_, err = c.Exec(context.Background(), "w", api.ExecRequest{Cmd: []string{"x"}}, nil, nil)
		if !errors.As(err, &e) || e.Status != 401 {
			t.Errorf("Exec with %d options: %v", len(opts), err)
		}
	}
	c, err := client.NewTCP(base+"/", client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if info, err := c.Info(context.Background()); err != nil || info.API != "v1" {
		t.Errorf("Info with the token = %+v, %v", info, err)
	}
	var out bytes.Buffer
	if st, err := c.Exec(context.Background(), "w", api.ExecRequest{Cmd: []string{"x"}}, &out, nil); err != nil || st.ExitCode != 0 || out.String() != "out\n" {
		t.Errorf("Exec with the token = %+v, %v", st, err)
	}
}

func TestTCPWithoutTokenOrTLSRefused(t *testing.T) {
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = srv.Serve(l)
	if err == nil || !strings.Contains(err.Error(), "refusing to listen on TCP") {
		t.Fatalf("Serve = %v", err)
	}
	c, _ := client.NewTCP("http://" + l.Addr().String())
	if _, err := c.Info(context.Background()); !errors.Is(err, client.ErrUnreachable) {
		t.Errorf("Info against the refused port: %v", err)
	}
}

func TestNewTCPURLs(t *testing.T) {
	for _, ok := range []string{"http://h:1", "https://h:7070", "http://127.0.0.1:8080/", "http://[::1]:9"} {
		if _, err := client.NewTCP(ok); err != nil {
			t.Errorf("NewTCP(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "h:1", "unix:///x", "ftp://h", "http://", "http://h/v1", "http://h?x=1", "http://u:p@h"} {
		if _, err := client.NewTCP(bad); err == nil {
			t.Errorf("NewTCP(%q) succeeded", bad)
		}
	}
}
