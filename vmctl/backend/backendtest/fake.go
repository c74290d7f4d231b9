package backendtest

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// Epoch is the time of the fixtures.
var Epoch = time.Date(2025, 1, 2, 3, 4, 5, 600, time.UTC)

// SandboxID is the ID of the fixture sandbox.
const SandboxID = "0123456789ab"

// Sandbox returns a valid running sandbox fixture with the given ID.
func Sandbox(id string) api.Sandbox {
	started := Epoch.Add(2 * time.Second)
	return api.Sandbox{
		ID: id, Name: "work1", State: api.StateRunning,
		Image:  api.ImageRef{Name: "debian", Digest: "sha256:" + fmt.Sprintf("%064x", 1), Dir: "/images/debian"},
		Domain: "agentbox-" + id, Accel: "tcg", VCPUs: 2, MemoryMiB: 512,
		Labels:    map[string]string{"team": "a"},
		CreatedAt: Epoch, StartedAt: &started, LastActivityAt: &started,
		BootMs: 1500, ExecCount: 3, Limits: api.Limits{TTLSeconds: 3600},
	}
}

// Process returns a valid running detached-process fixture.
func Process(id string) api.Process {
	return api.Process{ID: id, Pid: 42, Cmd: []string{"sleep", "10"}, State: api.ProcessRunning, StdinOpen: true, StartedAt: Epoch}
}

// File returns a valid FileInfo fixture for a regular file at p.
func File(p string, size int64) api.FileInfo {
	name := p
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			name = p[i+1:]
			break
		}
	}
	return api.FileInfo{Name: name, Path: p, Type: api.FileRegular, Size: size, Mode: "0644", ModTime: Epoch}
}

// Fake is the fake backend.Backend, with every capability interface.
// Each method records "Method ref" in Calls (a front must not call it for
// invalid requests), then answers from its *Fn field when one is set;
// else, with Memory set (NewMemory), from the in-memory sandboxes for the
// methods Memory documents; else with a fixed valid answer (the fixtures
// of this package). Set the fields before the fake serves.
//
// Fake declares the methods Memory serves (sandboxes, exec, processes
// and their terminals, files, console, audit, events) and those whose
// functions tests set in a Fake literal (lifecycle, fork, watch); the
// capabilities that only answer fixtures are parts it embeds by value, so
// a zero Fake works and their fields (Snapshot, Warm, Ports, Nodes,
// Templates) and methods are promoted: snapshotFake (snapshots.go),
// warmFake (warm.go), portFake (ports.go), nodeFake (nodes.go),
// templateFake (templates.go). Each part records into its own log; Calls
// merges the logs in call order.
type Fake struct {
	InfoFn          func(ctx context.Context) (api.Info, error)
	CreateSandboxFn func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	ListSandboxesFn func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error)
	GetSandboxFn    func(ctx context.Context, ref string) (api.Sandbox, error)
	StopSandboxFn   func(ctx context.Context, ref string) (api.Sandbox, error)
	DeleteSandboxFn func(ctx context.Context, ref string, force bool) error
	ExecFn          func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error)
	StartProcessFn  func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error)
	ListProcessesFn func(ctx context.Context, ref string) ([]api.Process, error)
	ExecHistoryFn   func(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error)
	GetProcessFn    func(ctx context.Context, ref, pid string) (api.Process, error)
	ProcessOutputFn func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error
	WriteStdinFn    func(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error)
	KillProcessFn   func(ctx context.Context, ref, pid, signal string) error
	UploadFn        func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error)
	DownloadFn      func(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error
	StatFn          func(ctx context.Context, ref, path string) (api.FileInfo, error)
	ListFn          func(ctx context.Context, ref, path string, depth int) ([]api.FileInfo, error)
	MkdirFn         func(ctx context.Context, ref string, req api.MkdirRequest) error
	MoveFn          func(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error)
	RemoveFileFn    func(ctx context.Context, ref, path string, recursive bool) error
	ConsoleFn       func(ctx context.Context, ref string, tail int64, w io.Writer) error
	AuditFn         func(ctx context.Context, ref string, emit func(audit.Entry) error) error
	EventsFn        func(ctx context.Context, emit func(api.Event) error) error

	// ExecInteractiveFn serves ExecInteractive (execws.go).
	ExecInteractiveFn func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error)
	// WatchFn is the Watch method's function (watch.go).
	WatchFn func(ctx context.Context, ref, path string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error
	// Fork holds the timeout and restore-of-several functions (fork.go).
	Fork ForkFns
	// Lifecycle holds the pause, resume and start methods' functions
	// (lifecycle.go).
	Lifecycle LifecycleFns
	// Terminals holds the process resize and attach functions (attach.go).
	Terminals TerminalFns

	// The fixture-only capabilities; their fields Snapshot, Warm, Ports,
	// Nodes and Templates are promoted.
	snapshotFake
	warmFake
	portFake
	nodeFake
	templateFake

	// Memory, when set, is the in-memory service the methods without a
	// *Fn answer from (memory.go); nil: the fixtures.
	Memory *Memory

	log callLog
}

var _ backend.Backend = (*Fake)(nil)

// callSeq orders the calls recorded in the logs of all Fakes' parts, so
// Calls can merge one Fake's logs in call order.
var callSeq atomic.Uint64

// call is one recorded call: its place in callSeq and "Method ref".
type call struct {
	n    uint64
	text string
}

// callLog is the calls one part of a Fake records. Its zero value is
// ready; it is never copied (it holds a mutex).
type callLog struct {
	mu    sync.Mutex
	calls []call
}

func (l *callLog) record(method, ref string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call{callSeq.Add(1), method + " " + ref})
}

func (l *callLog) snapshot() []call {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

func (l *callLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = nil
}

// logs returns the call logs of b and of its parts.
func (b *Fake) logs() []*callLog {
	return []*callLog{&b.log, &b.snapshotFake.log, &b.warmFake.log, &b.portFake.log, &b.nodeFake.log, &b.templateFake.log}
}

func (b *Fake) record(method, ref string) { b.log.record(method, ref) }

// Calls returns the calls so far, in order, "Method ref" each ("Info "
// for Info).
func (b *Fake) Calls() []string {
	var all []call
	for _, l := range b.logs() {
		all = append(all, l.snapshot()...)
	}
	slices.SortFunc(all, func(x, y call) int { return cmp.Compare(x.n, y.n) })
	if len(all) == 0 {
		return nil
	}
	out := make([]string, len(all))
	for i, c := range all {
		out[i] = c.text
	}
	return out
}

// Reset forgets the recorded calls.
func (b *Fake) Reset() {
	for _, l := range b.logs() {
		l.reset()
	}
}

// Info implements backend.Backend.
func (b *Fake) Info(ctx context.Context) (api.Info, error) {
	b.record("Info", "")
	if b.InfoFn != nil {
		return b.InfoFn(ctx)
	}
	if b.Memory != nil {
		return b.Memory.info(ctx)
	}
	return api.Info{Version: "test", API: "v1",
		Capacity:  api.Capacity{MemoryMiB: 8192, VCPUs: 8, UsedMemoryMiB: 512, UsedVCPUs: 2},
		Sandboxes: map[string]int{api.StateRunning: 1}}, nil
}

// CreateSandbox implements backend.Backend.
func (b *Fake) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	b.record("CreateSandbox", req.Name)
	if b.CreateSandboxFn != nil {
		return b.CreateSandboxFn(ctx, req)
	}
	if b.Memory != nil {
		return b.Memory.createSandbox(ctx, req, b.templateList)
	}
	return Sandbox(SandboxID), nil
}

// ListSandboxes implements backend.Backend.
func (b *Fake) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
	b.record("ListSandboxes", "")
	if b.ListSandboxesFn != nil {
		return b.ListSandboxesFn(ctx, labels, state)
	}
	if b.Memory != nil {
		return b.Memory.listSandboxes(labels, state)
	}
	return []api.Sandbox{Sandbox(SandboxID)}, nil
}

// GetSandbox implements backend.Backend.
func (b *Fake) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	b.record("GetSandbox", ref)
	if b.GetSandboxFn != nil {
		return b.GetSandboxFn(ctx, ref)
	}
	if b.Memory != nil {
		return b.Memory.getSandbox(ref)
	}
	return Sandbox(SandboxID), nil
}

// StopSandbox implements backend.Backend.
func (b *Fake) StopSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	b.record("StopSandbox", ref)
	if b.StopSandboxFn != nil {
		return b.StopSandboxFn(ctx, ref)
	}
	if b.Memory != nil {
		return b.Memory.stopSandbox(ref)
	}
	sb := Sandbox(SandboxID)
	stopped := Epoch.Add(time.Minute)
	sb.State, sb.StoppedAt = api.StateStopped, &stopped
	return sb, nil
}

// DeleteSandbox implements backend.Backend.
func (b *Fake) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	b.record("DeleteSandbox", ref)
	if b.DeleteSandboxFn != nil {
		return b.DeleteSandboxFn(ctx, ref, force)
	}
	if b.Memory != nil {
		return b.Memory.deleteSandbox(ref, force)
	}
	return nil
}

// Exec implements backend.Backend; by default it starts, writes "out\n" and
// "err\n" and exits 0.
func (b *Fake) Exec(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
	b.record("Exec", ref)
	if b.ExecFn != nil {
		return b.ExecFn(ctx, ref, req, started, stdout, stderr)
	}
	if b.Memory != nil {
		return b.Memory.exec(ctx, ref, req, started, stdout, stderr)
	}
	started("e1", 7)
	io.WriteString(stdout, "out\n")
	io.WriteString(stderr, "err\n")
	return api.ExitStatus{ExitCode: 0, DurationMs: 5}, nil
}

// StartProcess implements backend.Backend.
func (b *Fake) StartProcess(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
	b.record("StartProcess", ref)
	if b.StartProcessFn != nil {
		return b.StartProcessFn(ctx, ref, req)
	}
	if b.Memory != nil {
		return b.Memory.startProcess(ref, req)
	}
	p := Process("p1")
	p.Cmd = req.Cmd
	return p, nil
}

// ListProcesses implements backend.Backend.
func (b *Fake) ListProcesses(ctx context.Context, ref string) ([]api.Process, error) {
	b.record("ListProcesses", ref)
	if b.ListProcessesFn != nil {
		return b.ListProcessesFn(ctx, ref)
	}
	if b.Memory != nil {
		return b.Memory.listProcesses(ref)
	}
	return []api.Process{Process("p1")}, nil
}

// GetProcess implements backend.Backend.
func (b *Fake) GetProcess(ctx context.Context, ref, pid string) (api.Process, error) {
	b.record("GetProcess", ref)
	if b.GetProcessFn != nil {
		return b.GetProcessFn(ctx, ref, pid)
	}
	if b.Memory != nil {
		return b.Memory.getProcess(ref, pid)
	}
	return Process(pid), nil
}

// ProcessOutput implements backend.Backend; by default it sends "hello" on
// stdout at offset and an exit event.
func (b *Fake) ProcessOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
	b.record("ProcessOutput", ref)
	if b.ProcessOutputFn != nil {
		return b.ProcessOutputFn(ctx, ref, pid, offset, follow, emit)
	}
	if b.Memory != nil {
		return b.Memory.processOutput(ctx, ref, pid, offset, follow, emit)
	}
	if err := emit(api.ExecEvent{Type: api.EventStdout, Data: []byte("hello"), Offset: offset}); err != nil {
		return err
	}
	return emit(api.ExecEvent{Type: api.EventExit, Exit: &api.ExitStatus{ExitCode: 0, DurationMs: 9}})
}

// WriteStdin implements backend.Backend; by default it counts r's bytes.
func (b *Fake) WriteStdin(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
	b.record("WriteStdin", ref)
	if b.WriteStdinFn != nil {
		return b.WriteStdinFn(ctx, ref, pid, r, closeAfter)
	}
	if b.Memory != nil {
		return b.Memory.writeStdin(ref, pid, r, closeAfter)
	}
	return io.Copy(io.Discard, r)
}

// KillProcess implements backend.Backend.
func (b *Fake) KillProcess(ctx context.Context, ref, pid, signal string) error {
	b.record("KillProcess", ref)
	if b.KillProcessFn != nil {
		return b.KillProcessFn(ctx, ref, pid, signal)
	}
	if b.Memory != nil {
		return b.Memory.killProcess(ref, pid, signal)
	}
	return nil
}

// Upload implements backend.Backend; by default it counts r's bytes.
func (b *Fake) Upload(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	b.record("Upload", ref)
	if b.UploadFn != nil {
		return b.UploadFn(ctx, ref, req, r)
	}
	if b.Memory != nil {
		return b.Memory.upload(ref, req, r)
	}
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return api.FileInfo{}, err
	}
	fi := File(req.Path, n)
	fi.Mode = api.FormatMode(req.Mode)
	return fi, nil
}

// Download implements backend.Backend; by default the file holds "content".
func (b *Fake) Download(ctx context.Context, ref, path string, open func(api.FileInfo) io.Writer) error {
	b.record("Download", ref)
	if b.DownloadFn != nil {
		return b.DownloadFn(ctx, ref, path, open)
	}
	if b.Memory != nil {
		return b.Memory.download(ref, path, open)
	}
	_, err := io.WriteString(open(File(path, 7)), "content")
	return err
}

// Stat implements backend.Backend.
func (b *Fake) Stat(ctx context.Context, ref, path string) (api.FileInfo, error) {
	b.record("Stat", ref)
	if b.StatFn != nil {
		return b.StatFn(ctx, ref, path)
	}
	if b.Memory != nil {
		return b.Memory.stat(ref, path)
	}
	return File(path, 7), nil
}

// List implements backend.Backend; by default the directory holds the
// files a and b, and with depth > 1 a directory d holding c.
func (b *Fake) List(ctx context.Context, ref, path string, depth int) ([]api.FileInfo, error) {
	b.record("List", ref)
	if b.ListFn != nil {
		return b.ListFn(ctx, ref, path, depth)
	}
	if b.Memory != nil {
		return b.Memory.list(ref, path, depth)
	}
	if depth > 1 {
		d := File(path+"/d", 4096)
		d.Type, d.Mode = api.FileDir, "0755"
		return []api.FileInfo{File(path+"/a", 1), File(path+"/b", 2), d, File(path+"/d/c", 3)}, nil
	}
	return []api.FileInfo{File(path+"/a", 1), File(path+"/b", 2)}, nil
}

// Move implements backend.Backend; by default it describes the
// destination as a 7-byte file.
func (b *Fake) Move(ctx context.Context, ref string, req api.MoveRequest) (api.FileInfo, error) {
	b.record("Move", ref)
	if b.MoveFn != nil {
		return b.MoveFn(ctx, ref, req)
	}
	if b.Memory != nil {
		return b.Memory.move(ref, req)
	}
	return File(req.Destination, 7), nil
}

// Mkdir implements backend.Backend.
func (b *Fake) Mkdir(ctx context.Context, ref string, req api.MkdirRequest) error {
	b.record("Mkdir", ref)
	if b.MkdirFn != nil {
		return b.MkdirFn(ctx, ref, req)
	}
	if b.Memory != nil {
		return b.Memory.mkdir(ref, req)
	}
	return nil
}

// RemoveFile implements backend.Backend.
func (b *Fake) RemoveFile(ctx context.Context, ref, path string, recursive bool) error {
	b.record("RemoveFile", ref)
	if b.RemoveFileFn != nil {
		return b.RemoveFileFn(ctx, ref, path, recursive)
	}
	if b.Memory != nil {
		return b.Memory.removeFile(ref, path, recursive)
	}
	return nil
}

// Console implements backend.Backend; by default the log is "booted\n".
func (b *Fake) Console(ctx context.Context, ref string, tail int64, w io.Writer) error {
	b.record("Console", ref)
	if b.ConsoleFn != nil {
		return b.ConsoleFn(ctx, ref, tail, w)
	}
	if b.Memory != nil {
		return b.Memory.console(ref, tail, w)
	}
	_, err := io.WriteString(w, "booted\n")
	return err
}

// Audit implements backend.Backend; by default it sends one exec entry.
func (b *Fake) Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error {
	b.record("Audit", ref)
	if b.AuditFn != nil {
		return b.AuditFn(ctx, ref, emit)
	}
	if b.Memory != nil {
		return b.Memory.audit(ref, emit)
	}
	code := 0
	return emit(audit.Entry{Time: Epoch, Sandbox: SandboxID, Caller: "uid:0", Action: audit.ActionExec,
		Args: map[string]any{"cmd": []any{"true"}}, ExecID: "e1", ExitCode: &code, DurationMs: 3,
		Stdout: &audit.OutputDigest{Bytes: 0, SHA256: fmt.Sprintf("%064x", 0)}})
}

// Events implements backend.Backend; by default it sends one event, then
// waits for ctx.
func (b *Fake) Events(ctx context.Context, emit func(api.Event) error) error {
	b.record("Events", "")
	if b.EventsFn != nil {
		return b.EventsFn(ctx, emit)
	}
	if b.Memory != nil {
		return b.Memory.events(emit)
	}
	if err := emit(api.Event{Time: Epoch, Type: api.EventSandboxState, Sandbox: SandboxID, Name: "work1", State: api.StateRunning}); err != nil {
		return err
	}
	<-ctx.Done()
	return ctx.Err()
}

// ExecHistory implements backend.Backend.
func (b *Fake) ExecHistory(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error) {
	b.record("ExecHistory", ref)
	if b.ExecHistoryFn != nil {
		return b.ExecHistoryFn(ctx, ref, limit)
	}
	if b.Memory != nil {
		return b.Memory.execHistory(ref, limit)
	}
	code := 0
	end := time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC)
	return []api.ExecRecord{{ID: "e000001", Cmd: []string{"true"}, Caller: "uid:0",
		StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), EndedAt: &end, ExitCode: &code}}, nil
}
