package backendtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// memExec is the part of a Memory that runs its scripted commands:
// attached and interactive execs, detached processes and their
// terminals, the exec history.
type memExec struct{ *memState }

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

// Execs returns the exec requests seen: attached, interactive and
// detached ones, in order.
func (m *memExec) Execs() []api.ExecRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.execs)
}

// Interactive returns the requests of the interactive execs seen
// (ExecInteractive; also in Execs).
func (m *memExec) Interactive() []api.ExecRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.interactive)
}

// Kills returns the kill requests seen, "PROCESS SIGNAL" each.
func (m *memExec) Kills() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.kills)
}

// Processes returns the number of detached processes started.
func (m *memExec) Processes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.procs)
}

// SetOutputError makes every process output stream end after its output
// with err as the "error" event, as the daemon's lost process or
// shutdown does (nil: end normally again).
func (m *memExec) SetOutputError(err *api.Error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outputErr = err
}

// NotifyAttach closes ch when the next attach session has started.
func (m *memExec) NotifyAttach(ch chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.attached = ch
}

// Sleeping receives a value whenever a "sleep" command starts (at most
// 16 unreceived).
func (m *memExec) Sleeping() <-chan struct{} { return m.sleeping }

// run is the scripted "guest": it runs cmd with stdin and returns its
// status.
func (m *memExec) run(ctx context.Context, cmd []string, stdin io.Reader, stdout, stderr io.Writer, kill <-chan struct{}) api.ExitStatus {
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

func (m *memExec) exec(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
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

func (m *memExec) execInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
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
	m    *memExec
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

func (m *memExec) startProcess(ref string, req api.ExecRequest) (api.Process, error) {
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
func (m *memExec) proc(ref, pid string) (*memProc, error) {
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

func (m *memExec) listProcesses(ref string) ([]api.Process, error) {
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

func (m *memExec) getProcess(ref, pid string) (api.Process, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.proc(ref, pid)
	if err != nil {
		return api.Process{}, err
	}
	return p.p, nil
}

func (m *memExec) processOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
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

func (m *memExec) writeStdin(ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
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

func (m *memExec) killProcess(ref, pid, signal string) error {
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
func (m *memExec) resizeProcess(ref, pid string, size api.TtySize) (api.Process, error) {
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
func (m *memExec) attachProcess(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
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

func (m *memExec) execHistory(ref string, limit int) ([]api.ExecRecord, error) {
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
