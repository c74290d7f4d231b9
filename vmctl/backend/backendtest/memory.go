package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// Memory is the in-memory service behind a Fake from NewMemory. Sandboxes
// are records (IDs 000000abc001, 000000abc002, … in create order, booted
// at once, running), each with an in-memory filesystem holding / and
// /work; commands are a few scripted programs:
//
//	out STDOUT STDERR CODE   writes STDOUT and STDERR, exits CODE
//	allbytes CODE            writes bytes 0..255 to stdout, 255..0 to stderr, exits CODE
//	cat                      copies stdin to stdout
//	sleep                    runs until killed or ctx ends (137, signal 9)
//	timeout                  times out (124)
//	anything else            fails to start: not found (127)
//
// The Backend methods answered from Memory: Info, the sandbox methods,
// Exec, ExecInteractive, the detached process methods, the file methods,
// ExecHistory (every exec request seen, exited 0), Console, Audit (two
// fixed entries), Events (one event, then the stream ends as a daemon
// shutting down ends it), ResizeProcess and AttachProcess. A create with
// a template resolves it against the Fake's ListTemplates (404
// template_not_found otherwise). The other capability methods answer
// fixtures. Its accessors return copies and may be called at any time.
type Memory struct {
	mu        sync.Mutex
	next      int
	sandboxes map[string]*api.Sandbox // by ID
	files     map[string]map[string]*memFile
	procs     map[string]*memProc // by sandbox ID + "/" + process ID
	nprocs    int
	creates   []api.CreateSandboxRequest
	deletes   []string // "ID force=BOOL"
	execs     []api.ExecRequest
	kills     []string // "PROCESS SIGNAL"
	infoErr   error
	outputErr *api.Error
	attached  chan struct{}
	sleeping  chan struct{}
	// interactive are the requests of interactive execs, also in execs.
	interactive []api.ExecRequest
}

// memFile is a file or directory of a sandbox's filesystem.
type memFile struct {
	data []byte
	mode fs.FileMode
	dir  bool
}

// memProc is a detached process: its output is appended to out as
// events; changed is closed and replaced on every change.
type memProc struct {
	p       api.Process
	stdin   *io.PipeWriter
	out     []api.ExecEvent
	size    int64
	done    bool
	changed chan struct{}
	kill    chan struct{}
	killed  bool
}

// NewMemory returns a Fake answering from a fresh Memory (its Memory
// field); *Fn fields set on it still take precedence.
func NewMemory() *Fake {
	return &Fake{Memory: &Memory{
		sandboxes: map[string]*api.Sandbox{}, files: map[string]map[string]*memFile{}, procs: map[string]*memProc{},
		sleeping: make(chan struct{}, 16),
	}}
}

// Creates returns the create requests seen, in order (also refused ones).
func (m *Memory) Creates() []api.CreateSandboxRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.creates)
}

// Deletes returns the delete requests seen, "REF force=BOOL" each.
func (m *Memory) Deletes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.deletes)
}

// Execs returns the exec requests seen: attached, interactive and
// detached ones, in order.
func (m *Memory) Execs() []api.ExecRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.execs)
}

// Interactive returns the requests of the interactive execs seen
// (ExecInteractive; also in Execs).
func (m *Memory) Interactive() []api.ExecRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.interactive)
}

// Kills returns the kill requests seen, "PROCESS SIGNAL" each.
func (m *Memory) Kills() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.kills)
}

// Processes returns the number of detached processes started.
func (m *Memory) Processes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.procs)
}

// File returns the content and mode of the file (or directory) at p in
// the filesystem of sandbox id; ok is false when there is none.
func (m *Memory) File(id, p string) (data []byte, mode fs.FileMode, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.files[id][p]
	if !ok {
		return nil, 0, false
	}
	return bytes.Clone(f.data), f.mode, true
}

// SetState puts sandbox ref (ID or name) in state, as the daemon's own
// transitions would (a pause, a guest's death). Errors: 404 not_found.
func (m *Memory) SetState(ref, state string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return err
	}
	sb.State = state
	return nil
}

// SetInfoError makes Info fail with err (nil: answer again).
func (m *Memory) SetInfoError(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.infoErr = err
}

// SetOutputError makes every process output stream end after its output
// with err as the "error" event, as the daemon's lost process or
// shutdown does (nil: end normally again).
func (m *Memory) SetOutputError(err *api.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outputErr = err
}

// NotifyAttach closes ch when the next attach session has started.
func (m *Memory) NotifyAttach(ch chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attached = ch
}

// Sleeping receives a value whenever a "sleep" command starts (at most
// 16 unreceived).
func (m *Memory) Sleeping() <-chan struct{} { return m.sleeping }

func notFound(format string, args ...any) error {
	return api.Errorf(http.StatusNotFound, api.CodeNotFound, format, args...)
}

// lookup finds a sandbox by ID or name; m.mu must be held.
func (m *Memory) lookup(ref string) (*api.Sandbox, error) {
	if sb, ok := m.sandboxes[ref]; ok {
		return sb, nil
	}
	for _, sb := range m.sandboxes {
		if sb.Name == ref {
			return sb, nil
		}
	}
	return nil, notFound("no sandbox %q: see `agentbox ls`", ref)
}

// running is lookup for a sandbox that must run (409
// sandbox_not_running); m.mu must be held.
func (m *Memory) running(ref string) (*api.Sandbox, error) {
	sb, err := m.lookup(ref)
	if err == nil && sb.State != api.StateRunning {
		err = api.Errorf(http.StatusConflict, api.CodeNotRunning, "sandbox %s is %s", sb.ID, sb.State)
	}
	return sb, err
}

func (m *Memory) info(context.Context) (api.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.infoErr != nil {
		return api.Info{}, m.infoErr
	}
	return api.Info{Version: "test", API: "v1"}, nil
}

func (m *Memory) createSandbox(ctx context.Context, req api.CreateSandboxRequest, templates func(context.Context) ([]api.Template, error)) (api.Sandbox, error) {
	m.mu.Lock()
	m.creates = append(m.creates, req)
	var taken error
	if req.Name != "" {
		if _, err := m.lookup(req.Name); err == nil {
			taken = api.Errorf(http.StatusConflict, api.CodeNameTaken, "the name %q is taken: choose another", req.Name)
		}
	}
	m.mu.Unlock()
	if taken != nil {
		return api.Sandbox{}, taken
	}
	if req.Template != "" {
		if err := templateImage(ctx, &req, templates); err != nil {
			return api.Sandbox{}, err
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	now := time.Now()
	sb := &api.Sandbox{
		Template: req.Template,
		ID:       fmt.Sprintf("%012x", 0xabc000+m.next), Name: req.Name, State: api.StateRunning,
		Image: api.ImageRef{Name: "test-image", Dir: req.Image}, Accel: "tcg",
		VCPUs: max(req.VCPUs, 1), MemoryMiB: max(req.MemoryMiB, 256), Labels: req.Labels,
		CreatedAt: now.Add(-90 * time.Second), StartedAt: &now, BootMs: 1234, Limits: req.Limits,
	}
	m.sandboxes[sb.ID] = sb
	m.files[sb.ID] = map[string]*memFile{"/": {dir: true, mode: 0o755}, "/work": {dir: true, mode: 0o755}}
	return *sb, nil
}

// templateImage resolves req.Template as the daemon does: the image is
// the template's, an unknown one is 404 template_not_found naming those
// there are.
func templateImage(ctx context.Context, req *api.CreateSandboxRequest, templates func(context.Context) ([]api.Template, error)) error {
	list, err := templates(ctx)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range list {
		if t.Name == req.Template {
			req.Image = t.Image.Dir
			return nil
		}
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return api.Errorf(http.StatusNotFound, api.CodeTemplateNotFound, "template %q not found: this daemon serves %s (`agentbox templates` lists them)", req.Template, strings.Join(names, ", "))
}

func (m *Memory) listSandboxes(labels map[string]string, state string) ([]api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []api.Sandbox
	for i := 1; i <= m.next; i++ {
		sb, ok := m.sandboxes[fmt.Sprintf("%012x", 0xabc000+i)]
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

func (m *Memory) getSandbox(ref string) (api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	return *sb, nil
}

func (m *Memory) stopSandbox(ref string) (api.Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	sb.State = api.StateStopped
	return *sb, nil
}

func (m *Memory) deleteSandbox(ref string, force bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.deletes = append(m.deletes, fmt.Sprintf("%s force=%t", ref, force))
	sb, err := m.lookup(ref)
	if err != nil {
		return err
	}
	if sb.State == api.StateRunning && !force {
		return api.Errorf(http.StatusConflict, api.CodeSandboxRunning, "sandbox %s is running: stop it first or remove it with force (agentbox rm -f)", sb.ID)
	}
	delete(m.sandboxes, sb.ID)
	return nil
}

// run is the scripted "guest": it runs cmd with stdin and returns its
// status.
func (m *Memory) run(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer, kill <-chan struct{}) api.ExitStatus {
	arg := func(i int) string {
		if i < len(cmd) {
			return cmd[i]
		}
		return ""
	}
	switch cmd[0] {
	case "out":
		io.WriteString(stdout, arg(1))
		io.WriteString(stderr, arg(2))
		code, _ := strconv.Atoi(arg(3))
		return api.ExitStatus{ExitCode: code}
	case "allbytes":
		var all [256]byte
		for i := range all {
			all[i] = byte(i)
		}
		stdout.Write(all[:])
		slices.Reverse(all[:])
		stderr.Write(all[:])
		code, _ := strconv.Atoi(arg(1))
		return api.ExitStatus{ExitCode: code}
	case "cat":
		if stdin != nil {
			io.Copy(stdout, stdin)
		}
		return api.ExitStatus{}
	case "sleep":
		select {
		case m.sleeping <- struct{}{}:
		default:
		}
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

func (m *Memory) exec(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
	m.mu.Lock()
	_, err := m.running(ref)
	m.execs = append(m.execs, req)
	m.mu.Unlock()
	if err != nil {
		return api.ExitStatus{}, err
	}
	started("e1", 100)
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = bytes.NewReader(req.Stdin)
	}
	return m.run(ctx, req.Cmd, stdin, stdout, stderr, nil), nil
}

func (m *Memory) execInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
	m.mu.Lock()
	_, err := m.running(ref)
	m.execs = append(m.execs, req)
	m.interactive = append(m.interactive, req)
	m.mu.Unlock()
	if err != nil {
		return api.ExitStatus{}, err
	}
	started(&Control{ID: "e1", PID: 100, Tty: req.Tty != nil})
	if req.Stdin != nil {
		stdin = io.MultiReader(bytes.NewReader(req.Stdin), stdin)
	}
	st := m.run(ctx, req.Cmd, stdin, stdout, stderr, nil)
	if ctx.Err() != nil {
		return api.ExitStatus{}, ctx.Err()
	}
	return st, nil
}

// procWriter appends one stream's output to a process.
type procWriter struct {
	m    *Memory
	p    *memProc
	kind string
}

func (w procWriter) Write(data []byte) (int, error) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	w.p.out = append(w.p.out, api.ExecEvent{Type: w.kind, Data: bytes.Clone(data), Offset: w.p.size})
	w.p.size += int64(len(data))
	close(w.p.changed)
	w.p.changed = make(chan struct{})
	return len(data), nil
}

func (m *Memory) startProcess(ref string, req api.ExecRequest) (api.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.running(ref)
	if err != nil {
		return api.Process{}, err
	}
	m.execs = append(m.execs, req)
	id := fmt.Sprintf("p%d", len(m.procs)+1)
	pr, pw := io.Pipe()
	var stdin io.Reader = pr
	if !req.StdinOpen {
		pw.Close()
	}
	p := &memProc{p: api.Process{ID: id, Pid: 200 + len(m.procs), Cmd: req.Cmd, State: api.ProcessRunning, StdinOpen: req.StdinOpen, StartedAt: time.Now()},
		stdin: pw, changed: make(chan struct{}), kill: make(chan struct{})}
	m.procs[sb.ID+"/"+id] = p
	go func() {
		st := m.run(context.Background(), req.Cmd, stdin, procWriter{m, p, api.EventStdout}, procWriter{m, p, api.EventStderr}, p.kill)
		pr.Close()
		m.mu.Lock()
		defer m.mu.Unlock()
		p.p.State, p.p.Exit, p.p.StdinOpen, p.done = api.ProcessExited, &st, false, true
		close(p.changed)
		p.changed = make(chan struct{})
	}()
	return p.p, nil
}

// proc finds a detached process; m.mu must be held.
func (m *Memory) proc(ref, pid string) (*memProc, error) {
	sb, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	p, ok := m.procs[sb.ID+"/"+pid]
	if !ok {
		return nil, notFound("no process %q in sandbox %s", pid, sb.ID)
	}
	return p, nil
}

func (m *Memory) listProcesses(ref string) ([]api.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb, err := m.lookup(ref)
	if err != nil {
		return nil, err
	}
	var out []api.Process
	for i := 1; i <= len(m.procs); i++ {
		if p, ok := m.procs[fmt.Sprintf("%s/p%d", sb.ID, i)]; ok {
			out = append(out, p.p)
		}
	}
	return out, nil
}

func (m *Memory) getProcess(ref, pid string) (api.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.proc(ref, pid)
	if err != nil {
		return api.Process{}, err
	}
	return p.p, nil
}

func (m *Memory) processOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
	m.mu.Lock()
	p, err := m.proc(ref, pid)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	sent := 0
	for {
		m.mu.Lock()
		events := p.out[sent:]
		sent = len(p.out)
		done, changed, exit := p.done, p.changed, p.p.Exit
		m.mu.Unlock()
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
		m.mu.Lock()
		outputErr := m.outputErr
		m.mu.Unlock()
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

func (m *Memory) writeStdin(ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
	m.mu.Lock()
	p, err := m.proc(ref, pid)
	if err == nil && !p.p.StdinOpen {
		err = api.Errorf(http.StatusConflict, api.CodeStdinClosed, "the stdin of process %s is closed", pid)
	}
	m.mu.Unlock()
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(p.stdin, r)
	if closeAfter {
		p.stdin.Close()
		m.mu.Lock()
		p.p.StdinOpen = false
		m.mu.Unlock()
	}
	return n, err
}

func (m *Memory) killProcess(ref, pid, signal string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.proc(ref, pid)
	if err != nil {
		return err
	}
	m.kills = append(m.kills, pid+" "+signal)
	if p.done {
		return api.Errorf(http.StatusConflict, api.CodeProcessExited, "process %s has exited", pid)
	}
	if !p.killed {
		p.killed = true
		close(p.kill)
	}
	return nil
}

// resizeProcess refuses a process without a terminal as the daemon
// refuses it.
func (m *Memory) resizeProcess(ref, pid string, size api.TtySize) (api.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.proc(ref, pid)
	if err != nil {
		return api.Process{}, err
	}
	if p.p.Tty == nil {
		return api.Process{}, api.Invalidf("process %s: process has no terminal", pid)
	}
	p.p.Tty = &size
	return p.p, nil
}

// attachProcess attaches through processOutput (from the offset, default
// 0) and writeStdin; controls in a *Control.
func (m *Memory) attachProcess(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
	p, err := m.getProcess(ref, pid)
	if err != nil {
		return api.ExitStatus{}, err
	}
	var offset int64
	if at.Offset != nil {
		offset = *at.Offset
	}
	at.Started(&Control{ID: pid, PID: p.Pid, Tty: p.Tty != nil}, p, offset)
	m.mu.Lock()
	if m.attached != nil {
		close(m.attached)
		m.attached = nil
	}
	m.mu.Unlock()
	if at.Stdin != nil {
		go m.writeStdin(ref, pid, at.Stdin, false)
	}
	var st api.ExitStatus
	err = m.processOutput(ctx, ref, pid, offset, true, func(ev api.ExecEvent) error {
		switch ev.Type {
		case api.EventStdout:
			_, err := at.Stdout.Write(ev.Data)
			return err
		case api.EventStderr:
			_, err := at.Stderr.Write(ev.Data)
			return err
		case api.EventExit:
			st = *ev.Exit
		}
		return nil
	})
	return st, err
}

// fs returns a running sandbox's files; m.mu must be held.
func (m *Memory) fs(ref string) (map[string]*memFile, error) {
	sb, err := m.running(ref)
	if err != nil {
		return nil, err
	}
	return m.files[sb.ID], nil
}

func fileInfo(p string, f *memFile) api.FileInfo {
	fi := api.FileInfo{Name: path.Base(p), Path: p, Type: api.FileRegular, Size: int64(len(f.data)), Mode: fmt.Sprintf("%04o", f.mode)}
	if f.dir {
		fi.Type = api.FileDir
	}
	return fi
}

// parentDirs checks (or with parents, makes) the directories above p.
func parentDirs(files map[string]*memFile, p string, parents bool) error {
	for d := path.Dir(p); d != "/"; d = path.Dir(d) {
		if f, ok := files[d]; !ok && parents {
			files[d] = &memFile{dir: true, mode: 0o755}
		} else if !ok || !f.dir {
			return notFound("%s: no such directory: create it or pass parents", d)
		}
	}
	return nil
}

func (m *Memory) upload(ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return api.FileInfo{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	if err := parentDirs(files, req.Path, req.Parents); err != nil {
		return api.FileInfo{}, err
	}
	f := &memFile{data: data, mode: req.Mode}
	files[req.Path] = f
	return fileInfo(req.Path, f), nil
}

func (m *Memory) download(ref, p string, open func(api.FileInfo) io.Writer) error {
	m.mu.Lock()
	files, err := m.fs(ref)
	var f *memFile
	if err == nil {
		var ok bool
		if f, ok = files[p]; !ok {
			err = notFound("%s: no such file", p)
		} else if f.dir {
			err = api.Errorf(http.StatusUnprocessableEntity, api.CodeNotAFile, "%s is a directory, not a file", p)
		}
	}
	m.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = open(fileInfo(p, f)).Write(f.data)
	return err
}

func (m *Memory) stat(ref, p string) (api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, ok := files[p]
	if !ok {
		return api.FileInfo{}, notFound("%s: no such file", p)
	}
	return fileInfo(p, f), nil
}

// under reports whether p is below dir, and how many levels.
func under(dir, p string) (int, bool) {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	if p == dir || !strings.HasPrefix(p, prefix) {
		return 0, false
	}
	return strings.Count(p[len(prefix):], "/") + 1, true
}

func (m *Memory) list(ref, p string, depth int) ([]api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return nil, err
	}
	d, ok := files[p]
	if !ok {
		return nil, notFound("%s: no such directory", p)
	}
	if !d.dir {
		return nil, api.Errorf(http.StatusUnprocessableEntity, api.CodeNotADirectory, "%s is a file, not a directory", p)
	}
	var out []api.FileInfo
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if n, ok := under(p, name); ok && n <= max(depth, 1) {
			out = append(out, fileInfo(name, files[name]))
		}
	}
	return out, nil
}

func (m *Memory) move(ref string, req api.MoveRequest) (api.FileInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return api.FileInfo{}, err
	}
	f, ok := files[req.Source]
	if !ok {
		return api.FileInfo{}, notFound("%s: no such file", req.Source)
	}
	if err := parentDirs(files, req.Destination, false); err != nil {
		return api.FileInfo{}, err
	}
	for name, g := range files {
		if _, ok := under(req.Source, name); ok {
			delete(files, name)
			files[req.Destination+name[len(req.Source):]] = g
		}
	}
	delete(files, req.Source)
	files[req.Destination] = f
	return fileInfo(req.Destination, f), nil
}

func (m *Memory) mkdir(ref string, req api.MkdirRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return err
	}
	if err := parentDirs(files, req.Path, req.Parents); err != nil {
		return err
	}
	if f, ok := files[req.Path]; ok && !(f.dir && req.Parents) {
		return api.Errorf(http.StatusConflict, api.CodeConflict, "%s exists already", req.Path)
	}
	files[req.Path] = &memFile{dir: true, mode: 0o755}
	return nil
}

func (m *Memory) removeFile(ref, p string, recursive bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	files, err := m.fs(ref)
	if err != nil {
		return err
	}
	if _, ok := files[p]; !ok {
		return notFound("%s: no such file", p)
	}
	for name := range files {
		if _, ok := under(p, name); ok {
			if !recursive {
				return api.Errorf(http.StatusConflict, api.CodeConflict, "%s is a directory that is not empty: remove it recursively", p)
			}
			delete(files, name)
		}
	}
	delete(files, p)
	return nil
}

func (m *Memory) console(ref string, tail int64, w io.Writer) error {
	m.mu.Lock()
	_, err := m.lookup(ref)
	m.mu.Unlock()
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

// MemoryAudit returns what Memory's Audit sends: a create and an exec of
// sandbox 000000abc001.
func MemoryAudit() []audit.Entry {
	return []audit.Entry{
		{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionCreate, Args: map[string]any{"image": "/img"}, DurationMs: 1500},
		{Time: time.Date(2025, 1, 2, 3, 4, 7, 0, time.UTC), Sandbox: "000000abc001", Caller: "uid:0", Action: audit.ActionExec, Args: map[string]any{"cmd": []any{"sh", "-c", "echo hi"}}, ExecID: "e1", ExitCode: intPtr(3), DurationMs: 20, BytesOut: 3, Stdout: &audit.OutputDigest{Bytes: 3, SHA256: strings.Repeat("0", 64), Head: "hi\n"}},
	}
}

func (m *Memory) audit(ref string, emit func(audit.Entry) error) error {
	for _, e := range MemoryAudit() {
		if ref == "" || e.Sandbox == ref {
			if err := emit(e); err != nil {
				return err
			}
		}
	}
	return nil
}

func intPtr(i int) *int { return &i }

func (m *Memory) events(emit func(api.Event) error) error {
	return emit(api.Event{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: api.EventSandboxState, Sandbox: "000000abc001", Name: "w1", State: api.StateFailed, Reason: "guest died"})
}

func (m *Memory) execHistory(ref string, limit int) ([]api.ExecRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := m.lookup(ref); err != nil {
		return nil, err
	}
	out := []api.ExecRecord{}
	start := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for i, req := range m.execs {
		code, end := 0, start.Add(time.Duration(i+1)*time.Second+250*time.Millisecond)
		out = append(out, api.ExecRecord{ID: fmt.Sprintf("e%06d", i+1), Cmd: req.Cmd, Caller: "uid:0",
			StartedAt: start.Add(time.Duration(i+1) * time.Second), EndedAt: &end, ExitCode: &code})
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out, nil
}
