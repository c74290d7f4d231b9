package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/store"
)

// execService is the daemon's commands, one home for all of their
// bookkeeping: attached execs (Exec, ExecInteractive: exec.go,
// interactive.go), detached processes and their terminals (StartProcess
// and the process calls: exec.go, attach.go; their tables across pauses
// and daemon restarts: procs.go), the exec history, their audit entries
// and metrics. It takes the core (and through it the manager), never the
// Daemon.
type execService struct{ *core }

// beginExec begins a command on b's sandbox (sandbox.BeginExec: busy
// until endExec, counted by execCount) and returns its exec ID and the
// agent request with the sandbox's defaults; errors:
// sandbox.ErrExecLimit; ErrNotRunning when an idle action paused or
// stopped the sandbox meanwhile (paused: the message says how to
// resume). An attached command also holds up Shutdown until endExec.
func (s *execService) beginExec(b *box, req api.ExecRequest, attached bool) (string, agentproto.ExecRequest, error) {
	areq := agentproto.ExecRequest{Argv: req.Cmd, Env: req.Env, Dir: req.Cwd, UID: req.UID, GID: req.GID, User: req.User, TimeoutMs: req.TimeoutMs}
	if req.Tty != nil {
		areq.Tty = &agentproto.TtySize{Rows: uint16(req.Tty.Rows), Cols: uint16(req.Tty.Cols)}
	}
	var id string
	err := b.sb.BeginExec(func(a *sandbox.ExecAccount) (err error) {
		id, areq, err = execCount(a, b.sb.ID, areq)
		return err
	})
	if errors.Is(err, sandbox.ErrNotRunning) && b.sb.State() == sandbox.StatePaused {
		err = sandbox.ErrNotRunning.WithMessage(pausedMessage(b.sb)) // lifecycle.go
	}
	if err != nil {
		return "", areq, err
	}
	if attached {
		s.inflight.Add(1)
	}
	return id, areq, nil
}

// execCount counts one command of sandbox id in a, its accounting (under
// the sandbox's lock: sandbox.BeginExec). It returns the command's exec
// ID ("e" and 6 digits, in start order) and req with the sandbox's
// default timeout (ExecLimits.ExecTimeoutMs) when req gives none and its
// default environment (ExecAccount.Env) before req's own, which
// overrides it key by key. Errors: sandbox.ErrExecLimit, nothing
// counted, when MaxExecs commands have begun (its details say
// max_execs).
func execCount(a *sandbox.ExecAccount, id string, req agentproto.ExecRequest) (string, agentproto.ExecRequest, error) {
	if lim := a.Limits.MaxExecs; lim > 0 && a.ExecCount >= lim {
		msg := fmt.Sprintf("sandbox %s has run its %d commands (max_execs): create a new sandbox", id, lim)
		return "", req, errdefs.WithDetails(sandbox.ErrExecLimit.WithMessage(msg), map[string]any{"max_execs": lim})
	}
	a.ExecCount++
	if req.TimeoutMs == 0 {
		req.TimeoutMs = a.Limits.ExecTimeoutMs
	}
	if len(a.Env) > 0 {
		req.Env = append(slices.Clip(a.Env), req.Env...)
	}
	return fmt.Sprintf("e%06d", a.ExecCount), req, nil
}

// endExec ends what beginExec began.
func (s *execService) endExec(b *box, attached bool) {
	b.sb.EndExec()
	if attached {
		s.inflight.Done()
	}
}

// execArgs are the audit arguments of an exec: the argv, cwd, env keys
// (values may be secrets) and the timeout.
func execArgs(req agentproto.ExecRequest, detached bool) map[string]any {
	args := map[string]any{"cmd": req.Argv}
	if req.Dir != "" {
		args["cwd"] = req.Dir
	}
	if len(req.Env) > 0 {
		args["env_keys"] = envKeys(req.Env) // createaudit.go
	}
	if req.TimeoutMs > 0 {
		args["timeout_ms"] = req.TimeoutMs
	}
	if req.UID != nil {
		args["uid"] = *req.UID
	}
	if req.User != "" {
		args["user"] = req.User
	}
	if detached {
		args["detached"] = true
	}
	if req.Tty != nil {
		args["tty"] = fmt.Sprintf("%dx%d", req.Tty.Rows, req.Tty.Cols)
	}
	return args
}

// apiStatus converts the guest's exit status.
func apiStatus(st agentproto.ExitStatus, dur time.Duration) api.ExitStatus {
	return api.ExitStatus{ExitCode: st.ShellCode(), Signal: st.Signal, TimedOut: st.TimedOut, Error: st.Error, DurationMs: ms(dur)}
}

// countingWriter counts and digests what passes to w.
type countingWriter struct {
	w      io.Writer
	n      atomic.Int64
	digest audit.OutputDigester
	// open, when set, holds every write until it is closed: output the
	// agent delivers right after the command started waits until the
	// caller was told it started (the API's "started" event comes first).
	open <-chan struct{}
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.open != nil {
		<-c.open
	}
	c.digest.Write(p)
	c.n.Add(int64(len(p)))
	if c.w == nil {
		return len(p), nil
	}
	return c.w.Write(p)
}

// countingReader counts and digests what is read from r.
type countingReader struct {
	r      io.Reader
	n      atomic.Int64
	digest audit.OutputDigester
	tty    *audit.TtyRecorder // nil without a terminal
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.digest.Write(p[:n])
		c.n.Add(int64(n))
		if c.tty != nil {
			c.tty.Input(p[:n])
		}
	}
	return n, err
}

// ttyWriter records a terminal's output in its session.
type ttyWriter struct {
	w   io.Writer
	rec *audit.TtyRecorder
}

func (t ttyWriter) Write(p []byte) (int, error) {
	t.rec.Output(p)
	return t.w.Write(p)
}

// attachment is how an attached command is connected to its caller: the
// request's Stdin bytes come first, then stdin (nil: none; /dev/null
// when there are no bytes either); started is called once the command
// runs, with its exec ID and the agent's process.
type attachment struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	started        func(execID string, p *agent.Process, rec *audit.TtyRecorder)
}

// Exec implements backend.Backend: an attached command whose output streams
// to stdout and stderr. The audit entry and the exec history are written
// when it ends.
func (s *execService) Exec(ctx context.Context, ref string, req api.ExecRequest, started func(execID string, pid int), stdout, stderr io.Writer) (api.ExitStatus, error) {
	return s.execAttached(ctx, ref, req, attachment{stdout: stdout, stderr: stderr, started: func(id string, p *agent.Process, _ *audit.TtyRecorder) {
		started(id, p.Pid())
	}})
}

// execAttached runs an attached command (POST .../exec, the interactive
// exec): admission and exec accounting, the guest command, its audit
// entry (with stdin's digest and, on a terminal, the recorded session)
// and history, and metrics.
func (s *execService) execAttached(ctx context.Context, ref string, req api.ExecRequest, at attachment) (api.ExitStatus, error) {
	b, err := s.running(ctx, ref)
	if err != nil {
		return api.ExitStatus{}, err
	}
	if ctx, err = s.policyExec(ctx, b, &req, execMode(at.stdin != nil)); err != nil { // policy.go
		return api.ExitStatus{}, err
	}
	id, areq, err := s.beginExec(b, req, true)
	if err != nil {
		return api.ExitStatus{}, err
	}
	defer s.endExec(b, true)
	start := time.Now()
	var rec *audit.TtyRecorder
	if areq.Tty != nil {
		rec = audit.NewTtyRecorder(int(areq.Tty.Rows), int(areq.Tty.Cols), s.cfg.AuditFullTty)
	}
	var stdin *countingReader
	switch {
	case req.Stdin != nil && at.stdin != nil:
		stdin = &countingReader{r: io.MultiReader(bytes.NewReader(req.Stdin), at.stdin), tty: rec}
	case req.Stdin != nil:
		stdin = &countingReader{r: bytes.NewReader(req.Stdin), tty: rec}
	case at.stdin != nil:
		stdin = &countingReader{r: at.stdin, tty: rec}
	}
	stdout := at.stdout
	if rec != nil {
		stdout = ttyWriter{w: stdout, rec: rec}
	}
	startedSent := make(chan struct{})
	out := &countingWriter{w: stdout, open: startedSent}
	errw := &countingWriter{w: at.stderr, open: startedSent}
	var st agentproto.ExitStatus
	var p *agent.Process
	if stdin != nil {
		p, err = b.sb.Start(ctx, areq, stdin, out, errw)
	} else {
		p, err = b.sb.Start(ctx, areq, nil, out, errw)
	}
	if err == nil && p.Pid() > 0 {
		at.started(id, p, rec)
	}
	close(startedSent)
	if errors.Is(err, sandbox.ErrNotRunning) {
		return api.ExitStatus{}, err
	}
	if err == nil {
		st, err = p.Wait()
	}
	dur := time.Since(start)
	// A start failure is a status (126, 127), not an API error. Wait
	// returns it as a fresh *agentproto.ExecError (st.Err() allocates one
	// per call, so compare by type, not by pointer).
	var xe *agentproto.ExecError
	if st.ErrorKind != "" && (err == nil || errors.As(err, &xe)) {
		err = nil
	}
	if err != nil && ctx.Err() == nil {
		err = pausedErr(b.sb, b.sb.Explain(err)) // procs.go: cut by a pause to disk
	}
	status := apiStatus(st, dur)
	if status.TimedOut {
		status.TimeoutMs = areq.TimeoutMs // after defaults and the policy's cap
	}

	e := s.requestEntry(ctx, b.sb.ID, audit.ActionExec, execArgs(areq, false), start, nil) // the error below
	e.ExecID, e.DurationMs, e.BytesOut = id, ms(dur), out.n.Load()+errw.n.Load()
	e.Stdout, e.Stderr = out.digest.Digest(), errw.digest.Digest()
	if stdin != nil {
		e.BytesIn, e.Stdin = stdin.n.Load(), stdin.digest.Digest()
	}
	if rec != nil {
		e.Tty = rec.Session()
	}
	h := store.Exec{ID: id, Sandbox: b.sb.ID, Cmd: areq.Argv, Cwd: areq.Dir, StartedAt: start.UTC(), EndedAt: time.Now().UTC(),
		BytesIn: e.BytesIn, BytesOut: e.BytesOut, Caller: e.Caller}
	result := "ok"
	if err != nil {
		code, msg := auditError(err)
		if ctx.Err() != nil {
			code, msg = "cancelled", "the caller went away; the command was killed"
		}
		e.Error, e.ErrorMessage, h.Error, result = code, msg, msg, "error"
	} else {
		code := status.ExitCode
		e.ExitCode, h.ExitCode, h.Signal, h.TimedOut, h.Error = &code, &code, st.Signal, st.TimedOut, st.Error
		if code != 0 {
			result = "exit"
		}
	}
	s.appendAudit(e)
	s.finishExec(b, h)
	s.metrics.exec.Observe(dur.Seconds())
	s.metrics.execs.WithLabelValues("attached", result).Inc()
	s.metrics.bytes.WithLabelValues("in", "stdio").Add(float64(e.BytesIn))
	s.metrics.bytes.WithLabelValues("out", "stdio").Add(float64(e.BytesOut))
	switch {
	case err != nil && ctx.Err() != nil:
		return status, ctx.Err() // the caller is gone; nobody reads an error
	case err != nil:
		return status, err
	}
	return status, nil
}

// finishExec stores the exec's history entry and the sandbox's accounting
// in the background: two bbolt commits (each an fsync) would otherwise
// delay the exit status the caller waits for. Shutdown waits for them.
func (s *execService) finishExec(b *box, h store.Exec) {
	s.inflight.Add(1)
	go func() {
		defer s.inflight.Done()
		if err := s.store.PutExec(h); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("store exec history", "sandbox", b.sb.ID, "exec", h.ID, "err", err)
		}
		if !b.sb.State().Final() {
			b.sb.SaveExecAccount()
		}
	}()
}

// StartProcess implements backend.Backend: a detached command the guest
// agent keeps (not bound to the request, the agent connection or this
// daemon; see vmctl/process).
func (s *execService) StartProcess(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
	b, err := s.running(ctx, ref)
	if err != nil {
		return api.Process{}, err
	}
	if ctx, err = s.policyExec(ctx, b, &req, execDetached); err != nil { // policy.go
		return api.Process{}, err
	}
	id, areq, err := s.beginExec(b, req, false)
	if err != nil {
		return api.Process{}, err
	}
	caller := api.CallerFrom(ctx).ID
	start := time.Now()
	// The history entry exists before the command can end, so that
	// processExited always finds (and ends) it.
	h := store.Exec{ID: id, Sandbox: b.sb.ID, Cmd: areq.Argv, Cwd: areq.Dir, Detached: true, StartedAt: start.UTC(), Caller: caller, BytesIn: int64(len(req.Stdin))}
	if err := s.store.PutExec(h); err != nil {
		s.log.Warn("store exec history", "sandbox", b.sb.ID, "exec", id, "err", err)
	}
	// The guest keeps the command: the request only bounds the spawn.
	info, err := b.procs.Start(context.WithoutCancel(ctx), id, areq, req.Stdin, req.StdinOpen)
	e := s.requestEntry(ctx, b.sb.ID, audit.ActionProcessStart, execArgs(areq, true), start, nil)
	e.ExecID, e.BytesIn = id, int64(len(req.Stdin))
	s.appendAudit(e)
	if err != nil {
		s.endExec(b, false)
		err = b.sb.Explain(err)
		h.EndedAt, h.Error = time.Now().UTC(), err.Error()
		s.store.PutExec(h)
		return api.Process{}, err
	}
	b.sb.SaveExecAccount()
	return apiProcess(info), nil
}

// processExited is the process table's OnExit: audit, history, metrics.
// The audit entry is written before the history entry is ended: a daemon
// killed between the two finds the entry at its next start (adopted) and
// only ends the history, so the end is audited exactly once.
func (s *execService) processExited(b *box, info process.Info) {
	s.endExec(b, false)
	e, h, result := s.processEnd(b, info)
	s.appendAudit(e)
	if err := s.store.PutExec(h); err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Warn("store exec history", "sandbox", b.sb.ID, "exec", h.ID, "err", err)
	}
	s.metrics.execs.WithLabelValues("detached", result).Inc()
	s.metrics.bytes.WithLabelValues("out", "stdio").Add(float64(info.OutputBytes))
}

// processEnd returns what the end of b's detached process info records:
// its process.exit audit entry, its history entry ended (the one
// StartProcess wrote, else a new one) and its metrics result ("ok",
// "exit", "error").
func (s *execService) processEnd(b *box, info process.Info) (audit.Entry, store.Exec, string) {
	e := auditEntry(info.EndedAt, b.sb.ID, "daemon", audit.ActionProcessExit, map[string]any{"cmd": info.Argv})
	e.ExecID, e.DurationMs, e.BytesOut = info.ID, ms(info.EndedAt.Sub(info.StartedAt)), info.OutputBytes
	// The entry StartProcess wrote has the caller and cwd; end it.
	h, err := s.store.Exec(b.sb.ID, info.ID)
	if err != nil {
		h = store.Exec{ID: info.ID, Sandbox: b.sb.ID, Cmd: info.Argv, Detached: true, StartedAt: info.StartedAt.UTC()}
	}
	h.EndedAt, h.BytesOut = info.EndedAt.UTC(), info.OutputBytes
	result := "ok"
	if info.Exit != nil {
		code := info.Exit.ShellCode()
		e.ExitCode, h.ExitCode, h.Signal, h.TimedOut = &code, &code, info.Exit.Signal, info.Exit.TimedOut
		if code != 0 {
			result = "exit"
		}
	} else {
		e.Error, e.ErrorMessage, h.Error, result = "lost", info.Error, info.Error, "error"
	}
	return e, h, result
}

// apiProcess converts a process table snapshot.
func apiProcess(info process.Info) api.Process {
	p := api.Process{ID: info.ID, Pid: info.Pid, Cmd: info.Argv, State: info.State, StdinOpen: info.StdinOpen,
		OutputBytes: info.OutputBytes, OutputDropped: info.OutputDropped, StartedAt: info.StartedAt.UTC(), EndedAt: timePtr(info.EndedAt.UTC())}
	if info.EndedAt.IsZero() {
		p.EndedAt = nil
	}
	if info.Exit != nil {
		st := apiStatus(*info.Exit, info.EndedAt.Sub(info.StartedAt))
		p.Exit = &st
	}
	if info.Tty != nil {
		p.Tty = &api.TtySize{Rows: int(info.Tty.Rows), Cols: int(info.Tty.Cols)}
	}
	if p.Cmd == nil {
		p.Cmd = []string{}
	}
	return p
}

// procs resolves ref's process table; it works for stopped sandboxes too
// (their processes are listed as lost or ended; their output is gone with
// the guest).
func (s *execService) procs(ctx context.Context, ref string) (*box, error) {
	sb, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	b := s.box(sb.ID)
	if b == nil {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("sandbox %s has no processes", sb.ID))
	}
	return b, nil
}

// ListProcesses implements backend.Backend.
func (s *execService) ListProcesses(ctx context.Context, ref string) ([]api.Process, error) {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return nil, err
	}
	out := []api.Process{}
	for _, info := range b.procs.List(ctx) {
		out = append(out, apiProcess(info))
	}
	return out, nil
}

// GetProcess implements backend.Backend.
func (s *execService) GetProcess(ctx context.Context, ref, pid string) (api.Process, error) {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return api.Process{}, err
	}
	info, err := b.procs.Get(ctx, pid)
	if err != nil {
		return api.Process{}, err
	}
	return apiProcess(info), nil
}

// ProcessOutput implements backend.Backend. A follow rides across a
// pause of the sandbox (procs.go, followPaused): it waits while the
// sandbox is paused and goes on from the offset reached once it runs.
func (s *execService) ProcessOutput(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return err
	}
	next := max(offset, 0)
	var info process.Info
	for {
		info, err = b.procs.Output(ctx, pid, next, follow, func(c process.Chunk) error {
			if err := emit(api.ExecEvent{Type: c.Stream, Data: c.Data, Offset: c.Offset}); err != nil {
				return err
			}
			next = c.Offset + int64(len(c.Data))
			return nil
		})
		if err == nil || ctx.Err() != nil || !follow || !s.followPaused(ctx, b.sb) {
			break
		}
		// The table may not know the process yet (a daemon restarted
		// while the sandbox was paused adopts on resume, which may not
		// have run yet): adopting twice is harmless.
		s.resumeProcesses(ctx, b)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if lost, ok := s.lostWithStop(ctx, b, pid); ok {
			return emit(api.ExecEvent{Type: api.EventError, Error: api.ErrorFrom(lostError(b.sb, pid, lost))})
		}
		return pausedErr(b.sb, err)
	}
	switch {
	case info.Exit != nil:
		st := apiStatus(*info.Exit, info.EndedAt.Sub(info.StartedAt))
		return emit(api.ExecEvent{Type: api.EventExit, Exit: &st})
	case info.State == process.StateLost:
		return emit(api.ExecEvent{Type: api.EventError, Error: api.ErrorFrom(lostError(b.sb, pid, info))})
	}
	return nil
}

// WriteStdin implements backend.Backend.
func (s *execService) WriteStdin(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	n, err := b.procs.WriteStdin(ctx, pid, r, closeAfter)
	err = pausedErr(b.sb, err)
	e := s.requestEntry(ctx, b.sb.ID, audit.ActionProcessStdin, map[string]any{"close": closeAfter}, start, err)
	e.ExecID, e.BytesIn = pid, n
	if err != nil {
		s.appendAudit(e)
		return n, err
	}
	s.appendAudit(e)
	b.sb.Touch()
	s.metrics.bytes.WithLabelValues("in", "stdio").Add(float64(n))
	return n, nil
}

// KillProcess implements backend.Backend.
func (s *execService) KillProcess(ctx context.Context, ref, pid, signal string) error {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return err
	}
	sig, err := parseSignal(signal)
	if err != nil {
		return err
	}
	start := time.Now()
	err = pausedErr(b.sb, b.procs.Signal(ctx, pid, sig))
	s.auditAction(ctx, b.sb.ID, audit.ActionProcessKill, map[string]any{"process": pid, "signal": int(sig)}, start, err)
	if err != nil {
		return err
	}
	return nil
}

// signals are the names KillProcess accepts (signal(7)), without "SIG".
var signals = map[string]syscall.Signal{
	"HUP": syscall.SIGHUP, "INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT, "KILL": syscall.SIGKILL,
	"USR1": syscall.SIGUSR1, "USR2": syscall.SIGUSR2, "TERM": syscall.SIGTERM, "CONT": syscall.SIGCONT,
	"STOP": syscall.SIGSTOP, "ALRM": syscall.SIGALRM, "PIPE": syscall.SIGPIPE,
}

// parseSignal accepts "TERM", "SIGTERM", "term" or "15"; "" is KILL.
func parseSignal(s string) (syscall.Signal, error) {
	if s == "" {
		return syscall.SIGKILL, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n > 0 && n < 65 {
		return syscall.Signal(n), nil
	}
	if sig, ok := signals[strings.TrimPrefix(strings.ToUpper(s), "SIG")]; ok {
		return sig, nil
	}
	return 0, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("signal %q: use a name like TERM or KILL, or a number 1-64", s))
}

// ExecHistory implements backend.Backend: the sandbox's exec history from the
// store (attached and detached commands, newest limit when limit > 0).
func (s *execService) ExecHistory(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error) {
	sb, err := s.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	execs, err := s.store.Execs(sb.ID, limit)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	out := make([]api.ExecRecord, 0, len(execs))
	for _, e := range execs {
		out = append(out, api.ExecRecord{
			ID: e.ID, Cmd: e.Cmd, Cwd: e.Cwd, Detached: e.Detached, Caller: e.Caller,
			StartedAt: e.StartedAt, EndedAt: timePtr(e.EndedAt), ExitCode: e.ExitCode,
			Signal: e.Signal, TimedOut: e.TimedOut, Error: e.Error, BytesIn: e.BytesIn, BytesOut: e.BytesOut,
		})
	}
	return out, nil
}
