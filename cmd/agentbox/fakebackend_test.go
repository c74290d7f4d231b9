package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/apiserver/apitest"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// fakeBackend is an apiserver.Backend for CLI tests: sandboxes are records in a
// map, files live in memory, and commands are a few scripted programs:
//
//	out STDOUT STDERR CODE   writes STDOUT and STDERR, exits CODE
//	allbytes CODE            writes bytes 0..255 to stdout, 255..0 to stderr, exits CODE
//	cat                      copies stdin to stdout (detached processes)
//	sleep                    runs until killed or ctx ends
//	missing                  fails to start: not found (127)
//	timeout                  times out (124)
//
// Every call is recorded in calls.
type fakeBackend struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*api.Sandbox // by ID
	files     map[string]map[string]*fakeFile
	procs     map[string]*fakeProc // by sandbox ID + "/" + process ID
	creates   []api.CreateSandboxRequest
	deletes   []string // "ID force=BOOL"
	execs     []api.ExecRequest
	kills     []string // "PROCESS SIGNAL"
	infoErr   error
	// outputErr, if set, ends every process output stream after its
	// output, as the daemon's error event.
	outputErr *api.Error
	// attached, if set, is closed when an attach session starts.
	attached chan struct{}
	// sleeping receives a value whenever a "sleep" command starts.
	sleeping chan struct{}
	// interactive are the requests of interactive execs (with streamed
	// stdin or a terminal), also in execs.
	interactive []api.ExecRequest
}

type fakeFile struct {
	data []byte
	mode fs.FileMode
	dir  bool
}

// fakeProc is a detached process: its output is appended to out as
// events; changed is closed and replaced on every change.
type fakeProc struct {
	p       api.Process
	stdin   *io.PipeWriter
	out     []api.ExecEvent
	size    int64
	done    bool
	changed chan struct{}
	kill    chan struct{}
	killed  bool
}

func newFakeBackend() *fakeBackend {
	return &fakeBackend{sandboxes: map[string]*api.Sandbox{}, files: map[string]map[string]*fakeFile{}, procs: map[string]*fakeProc{}, sleeping: make(chan struct{}, 16)}
}

var _ apiserver.Backend = (*fakeBackend)(nil)

func notFound(format string, args ...any) error {
	return api.Errorf(http.StatusNotFound, api.CodeNotFound, format, args...)
}

// lookup finds a sandbox by ID or name; b.mu must be held.
func (b *fakeBackend) lookup(ref string) (*api.Sandbox, error) {
	if sb, ok := b.sandboxes[ref]; ok {
		return sb, nil
	}
	for _, sb := range b.sandboxes {
		if sb.Name == ref {
			return sb, nil
		}
	}
	return nil, notFound("no sandbox %q: see `agentbox ls`", ref)
}

func (b *fakeBackend) running(ref string) (*api.Sandbox, error) {
	sb, err := b.lookup(ref)
	if err == nil && sb.State != api.StateRunning {
		err = api.Errorf(http.StatusConflict, api.CodeNotRunning, "sandbox %s is %s", sb.ID, sb.State)
	}
	return sb, err
}

func (b *fakeBackend) Info(ctx context.Context) (api.Info, error) {
	if b.infoErr != nil {
		return api.Info{}, b.infoErr
	}
	return api.Info{Version: "test", API: "v1"}, nil
}

func (b *fakeBackend) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.creates = append(b.creates, req)
	if req.Name != "" {
		if _, err := b.lookup(req.Name); err == nil {
			return api.Sandbox{}, api.Errorf(http.StatusConflict, api.CodeNameTaken, "the name %q is taken: choose another", req.Name)
		}
	}
	if req.Template != "" {
		if err := b.templateImage(&req); err != nil { // templates_test.go
			return api.Sandbox{}, err
		}
	}
	b.next++
	now := time.Now()
	sb := &api.Sandbox{
		Template: req.Template,
		ID:       fmt.Sprintf("%012x", 0xabc000+b.next), Name: req.Name, State: api.StateRunning,
		Image: api.ImageRef{Name: "test-image", Dir: req.Image}, Accel: "tcg",
		VCPUs: max(req.VCPUs, 1), MemoryMiB: max(req.MemoryMiB, 256), Labels: req.Labels,
		CreatedAt: now.Add(-90 * time.Second), StartedAt: &now, BootMs: 1234, Limits: req.Limits,
	}
	b.sandboxes[sb.ID] = sb
	b.files[sb.ID] = map[string]*fakeFile{"/": {dir: true, mode: 0o755}, "/work": {dir: true, mode: 0o755}}
	return *sb, nil
}

func (b *fakeBackend) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []api.Sandbox
	for i := 1; i <= b.next; i++ {
		sb, ok := b.sandboxes[fmt.Sprintf("%012x", 0xabc000+i)]
		if !ok || (state != "" && sb.State != state) {
			continue
		}
		match := true
		for k, v := range labels {
			if sb.Labels[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, *sb)
		}
	}
	return out, nil
}

func (b *fakeBackend) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, err := b.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	return *sb, nil
}

func (b *fakeBackend) StopSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, err := b.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.State = api.StateStopped
	return *sb, nil
}

func (b *fakeBackend) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deletes = append(b.deletes, fmt.Sprintf("%s force=%t", ref, force))
	sb, err := b.lookup(ref)
	if err != nil {
		return err
	}
	if sb.State == api.StateRunning && !force {
		return api.Errorf(http.StatusConflict, api.CodeSandboxRunning, "sandbox %s is running: stop it first or remove it with force (agentbox rm -f)", sb.ID)
	}
	delete(b.sandboxes, sb.ID)
	return nil
}

// run is the scripted "guest": it runs cmd with stdin and returns its
// status.
func (b *fakeBackend) run(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer, kill <-chan struct{}) api.ExitStatus {
	switch cmd[0] {
	case "out":
		io.WriteString(stdout, cmd[1])
		io.WriteString(stderr, cmd[2])
		code, _ := strconv.Atoi(cmd[3])
		return api.ExitStatus{ExitCode: code}
	case "allbytes":
		var all [256]byte
		for i := range all {
			all[i] = byte(i)
		}
		stdout.Write(all[:])
		slices.Reverse(all[:])
		stderr.Write(all[:])
		code, _ := strconv.Atoi(cmd[1])
		return api.ExitStatus{ExitCode: code}
	case "cat":
		if stdin != nil {
			io.Copy(stdout, stdin)
		}
		return api.ExitStatus{}
	case "sleep":
		b.sleeping <- struct{}{}
		select {
		case <-ctx.Done():
		case <-kill:
		}
		return api.ExitStatus{ExitCode: 137, Signal: 9}
	case "timeout":
		return api.ExitStatus{ExitCode: 124, Signal: 9, TimedOut: true}
	}
	return api.ExitStatus{ExitCode: 127, Error: cmd[0] + ": command not found"}
}

func (b *fakeBackend) Exec(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
	b.mu.Lock()
	_, err := b.running(ref)
	b.execs = append(b.execs, req)
	b.mu.Unlock()
	if err != nil {
		return api.ExitStatus{}, err
	}
	started("e1", 100)
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = bytes.NewReader(req.Stdin)
	}
	return b.run(ctx, req.Cmd, stdin, stdout, stderr, nil), nil
}

func (b *fakeBackend) ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(apiserver.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
	b.mu.Lock()
	_, err := b.running(ref)
	b.execs = append(b.execs, req)
	b.interactive = append(b.interactive, req)
	b.mu.Unlock()
	if err != nil {
		return api.ExitStatus{}, err
	}
	started(&apitest.Control{ID: "e1", PID: 100, Tty: req.Tty != nil})
	if req.Stdin != nil {
		stdin = io.MultiReader(bytes.NewReader(req.Stdin), stdin)
	}
	st := b.run(ctx, req.Cmd, stdin, stdout, stderr, nil)
	if ctx.Err() != nil {
		return api.ExitStatus{}, ctx.Err()
	}
	return st, nil
}

// procWriter appends one stream's output to a process.
type procWriter struct {
	b    *fakeBackend
	p    *fakeProc
	kind string
}

func (w procWriter) Write(data []byte) (int, error) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	w.p.out = append(w.p.out, api.ExecEvent{Type: w.kind, Data: bytes.Clone(data), Offset: w.p.size})
	w.p.size += int64(len(data))
	close(w.p.changed)
	w.p.changed = make(chan struct{})
	return len(data), nil
}

func (b *fakeBackend) StartProcess(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, err := b.running(ref)
	if err != nil {
		return api.Process{}, err
	}
	b.execs = append(b.execs, req)
	id := fmt.Sprintf("p%d", len(b.procs)+1)
	pr, pw := io.Pipe()
	var stdin io.Reader = pr
	if !req.StdinOpen {
		pw.Close()
	}
	p := &fakeProc{p: api.Process{ID: id, Pid: 200 + len(b.procs), Cmd: req.Cmd, State: api.ProcessRunning, StdinOpen: req.StdinOpen, StartedAt: time.Now()}, stdin: pw, changed: make(chan struct{}), kill: make(chan struct{})}
	b.procs[sb.ID+"/"+id] = p
	go func() {
		st := b.run(context.Background(), req.Cmd, stdin, procWriter{b, p, api.EventStdout}, procWriter{b, p, api.EventStderr}, p.kill)
		pr.Close()
		b.mu.Lock()
		defer b.mu.Unlock()
		p.p.State, p.p.Exit, p.p.StdinOpen, p.done = api.ProcessExited, &st, false, true
		close(p.changed)
		p.changed = make(chan struct{})
	}()
	return p.p, nil
}

func (b *fakeBackend) proc(ref, pid string) (*fakeProc, error) {
	sb, err := b.lookup(ref)
	if err != nil {
		return nil, err
	}
	p, ok := b.procs[sb.ID+"/"+pid]
	if !ok {
		return nil, notFound("no process %q in sandbox %s", pid, sb.ID)
	}
	return p, nil
}

func (b *fakeBackend) ListProcesses(ctx context.Context, ref string) ([]api.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	sb, err := b.lookup(ref)
	if err != nil {
		return nil, err
	}
	var out []api.Process
	for i := 1; i <= len(b.procs); i++ {
		if p, ok := b.procs[fmt.Sprintf("%s/p%d", sb.ID, i)]; ok {
			out = append(out, p.p)
		}
	}
	return out, nil
}

func (b *fakeBackend) GetProcess(ctx context.Context, ref, pid string) (api.Process, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.proc(ref, pid)
	if err != nil {
		return api.Process{}, err
	}
	return p.p, nil
}

func (b *fakeBackend) ProcessOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
	b.mu.Lock()
	p, err := b.proc(ref, pid)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	sent := 0
	for {
		b.mu.Lock()
		events := p.out[sent:]
		sent = len(p.out)
		done, changed, exit := p.done, p.changed, p.p.Exit
		b.mu.Unlock()
		for _, ev := range events {
			if end := ev.Offset + int64(len(ev.Data)); end <= offset {
				continue
			} else if ev.Offset < offset {
				ev.Data = ev.Data[offset-ev.Offset:]
				ev.Offset = offset
			}
			if err := emit(ev); err != nil {
				return err
			}
		}
		b.mu.Lock()
		outputErr := b.outputErr
		b.mu.Unlock()
		if outputErr != nil {
			return emit(api.ExecEvent{Type: api.EventError, Error: outputErr})
		}
		if done {
			return emit(api.ExecEvent{Type: api.EventExit, Exit: exit})
		}
		if !follow {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (b *fakeBackend) WriteStdin(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
	b.mu.Lock()
	p, err := b.proc(ref, pid)
	if err == nil && !p.p.StdinOpen {
		err = api.Errorf(http.StatusConflict, api.CodeStdinClosed, "the stdin of process %s is closed", pid)
	}
	b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(p.stdin, r)
	if closeAfter {
		p.stdin.Close()
		b.mu.Lock()
		p.p.StdinOpen = false
		b.mu.Unlock()
	}
	return n, err
}

func (b *fakeBackend) KillProcess(ctx context.Context, ref, pid, signal string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	p, err := b.proc(ref, pid)
	if err != nil {
		return err
	}
	b.kills = append(b.kills, pid+" "+signal)
	if p.done {
		return api.Errorf(http.StatusConflict, api.CodeProcessExited, "process %s has exited", pid)
	}
	if !p.killed {
		p.killed = true
		close(p.kill)
	}
	return nil
}

func (b *fakeBackend) fs(ref string) (map[string]*fakeFile, error) {
	sb, err := b.running(ref)
	if err != nil {
		return nil, err
	}
	return b.files[sb.ID], nil
}

func info(p string, f *fakeFile) api.FileInfo {
	fi := api.FileInfo{Name: path.Base(p), Path: p, Type: api.FileRegular, Size: int64(len(f.data)), Mode: fmt.Sprintf("%04o", f.mode)}
	if f.dir {
		fi.Type = api.FileDir
	}
	return fi
}

func (b *fakeBackend) Upload(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	p, perm, parents := req.Path, req.Mode, req.Parents
	data, err := io.ReadAll(r)
	if err != nil {
		return api.FileInfo{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	files, err := b.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if f, ok := files[d]; !ok && parents {
			files[d] = &fakeFile{dir: true, mode: 0o755}
		} else if !ok || !f.dir {
			return api.FileInfo{}, notFound("%s: no such directory: create it or pass parents", d)
		}
	}
	f := &fakeFile{data: data, mode: perm}
	files[p] = f
	return info(p, f), nil
}

func (b *fakeBackend) Download(ctx context.Context, ref, p string, open func(api.FileInfo) io.Writer) error {
	b.mu.Lock()
	files, err := b.fs(ref)
	var f *fakeFile
	if err == nil {
		var ok bool
		if f, ok = files[p]; !ok {
			err = notFound("%s: no such file", p)
		} else if f.dir {
			err = api.Errorf(http.StatusUnprocessableEntity, api.CodeNotAFile, "%s is a directory, not a file", p)
		}
	}
	b.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = open(info(p, f)).Write(f.data)
	return err
}

func (b *fakeBackend) Stat(ctx context.Context, ref, p string) (api.FileInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	files, err := b.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, ok := files[p]
	if !ok {
		return api.FileInfo{}, notFound("%s: no such file", p)
	}
	return info(p, f), nil
}

func (b *fakeBackend) List(ctx context.Context, ref, p string, depth int) ([]api.FileInfo, error) {
	return nil, api.Errorf(http.StatusNotImplemented, api.CodeInternal, "not in the fake")
}

func (b *fakeBackend) Move(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error) {
	return api.FileInfo{}, api.Errorf(http.StatusNotImplemented, api.CodeInternal, "not in the fake")
}

func (b *fakeBackend) Mkdir(ctx context.Context, ref string, req api.MkdirRequest) error {
	return api.Errorf(http.StatusNotImplemented, api.CodeInternal, "not in the fake")
}

func (b *fakeBackend) RemoveFile(ctx context.Context, ref, p string, recursive bool) error {
	return api.Errorf(http.StatusNotImplemented, api.CodeInternal, "not in the fake")
}

func (b *fakeBackend) Console(ctx context.Context, ref string, tail int64, w io.Writer) error {
	b.mu.Lock()
	_, err := b.lookup(ref)
	b.mu.Unlock()
	if err != nil {
		return err
	}
	log := "[    0.000000] Linux version 6.1\nagentbox-init: agent up\n"
	if tail > 0 && tail < int64(len(log)) {
		log = log[int64(len(log))-tail:]
	}
	_, err = io.WriteString(w, log)
	return err
}

// auditEntries are what the fake's Audit sends.
var auditEntries = []audit.Entry{
	{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionCreate, Args: map[string]any{"image": "/img"}, DurationMs: 1500},
	{Time: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionExec, Args: map[string]any{"cmd": []any{"sh", "-c", "echo hi"}}, ExecID: "e1", ExitCode: intPtr(3), DurationMs: 20, BytesOut: 3, Stdout: &audit.OutputDigest{Bytes: 3, SHA256: strings.Repeat("0", 64), Head: "hi\n"}},
}

func (b *fakeBackend) Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error {
	for _, e := range auditEntries {
		if ref == "" || e.Sandbox == ref {
			if err := emit(e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Events sends one event and ends the stream, as a daemon shutting down
// would.
func (b *fakeBackend) Events(ctx context.Context, emit func(api.Event) error) error {
	return emit(api.Event{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: api.EventSandboxState, Sandbox: "000000abc001", Name: "w1", State: api.StateFailed, Reason: "guest died"})
}

func intPtr(i int) *int { return &i }

// ExecHistory lists every exec request seen, as finished with code 0.
func (b *fakeBackend) ExecHistory(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, err := b.lookup(ref); err != nil {
		return nil, err
	}
	out := []api.ExecRecord{}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i, req := range b.execs {
		code, end := 0, start.Add(time.Duration(i+1)*time.Second+250*time.Millisecond)
		out = append(out, api.ExecRecord{ID: fmt.Sprintf("e%06d", i+1), Cmd: req.Cmd, Caller: "uid:0",
			StartedAt: start.Add(time.Duration(i+1) * time.Second), EndedAt: &end, ExitCode: &code})
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}
