package guestagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent/procs"
)

// Processes is the agent's table of detached processes (the proc-*
// operations): commands that outlive the host session that started them,
// with their output ring (agentproto.ProcRingBytes each) and exit status,
// at most agentproto.ProcMax of them. One Processes serves every session
// of an agent (Options.Processes); its commands run until they end, are
// signalled, or Close.
type Processes struct {
	life  context.Context
	stop  context.CancelFunc
	table *procs.Table
}

// NewProcesses returns an empty table whose commands live until Close.
func NewProcesses() *Processes {
	life, stop := context.WithCancel(context.Background())
	return &Processes{life: life, stop: stop, table: procs.NewTable(procs.Options{
		BufferBytes:  agentproto.ProcRingBytes,
		MaxProcesses: agentproto.ProcMax,
	})}
}

// Close kills every detached process that still runs (SIGKILL to its
// group) and refuses new ones; it returns once the kills were sent.
func (p *Processes) Close() {
	p.table.CloseAll("the agent's process table was closed")
	p.stop()
}

// startLocal is the procs.StartFunc of the agent: startProcess (so an
// ExecRequest means the same for attached and detached commands), with
// stdin copied from stdin, output written to stdout and stderr until the
// pipes are drained, and the process group killed when ctx ends or the
// request's timeout expires.
func startLocal(opts Options) procs.StartFunc {
	return func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		req.Stdin = stdin != nil
		p, err := startProcess(&req, opts)
		if err != nil {
			st := agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecOther, Error: err.Error()}
			var se *startError
			if errors.As(err, &se) {
				st.ErrorKind = se.kind
			}
			lp := &localProc{done: make(chan struct{}), status: st}
			close(lp.done)
			return lp, nil
		}
		lp := &localProc{p: p, done: make(chan struct{})}
		if stdin != nil {
			in := io.Writer(p.stdin)
			if p.tty != nil {
				// The terminal's input, as for an attached exec
				// (readHost): echoed and edited by its line discipline.
				in = p.tty
			}
			go func() {
				defer p.closeStdin()
				_, _ = io.Copy(in, stdin) // EPIPE (EIO, closed) when the command stops reading
			}()
		}
		go lp.run(ctx, time.Duration(req.TimeoutMs)*time.Millisecond, stdout, stderr)
		return lp, nil
	}
}

// localProc is a detached command started by startLocal.
type localProc struct {
	p      *process // nil if it did not start
	done   chan struct{}
	status agentproto.ExitStatus // set before done is closed
}

// Pid implements procs.Proc.
func (lp *localProc) Pid() int {
	if lp.p == nil {
		return 0
	}
	return lp.p.child.pid
}

// Signal implements procs.Proc: the command's process group.
func (lp *localProc) Signal(_ context.Context, sig syscall.Signal) error {
	if lp.p == nil {
		return agentproto.ErrProcExited
	}
	if err := getReaper().signalGroup(lp.p.child, sig); err != nil {
		if errors.Is(err, errProcessDone) {
			return fmt.Errorf("%w: %w", agentproto.ErrProcExited, err)
		}
		return fmt.Errorf("kill %d: %w", -lp.p.child.pid, err)
	}
	return nil
}

// Resize implements procs.Terminal: the window size of the command's terminal
// (SIGWINCH to its foreground group). Errors wrap agentproto.ErrProcNoTty
// without a terminal, agentproto.ErrProcExited once the terminal was closed.
func (lp *localProc) Resize(size agentproto.TtySize) error {
	if lp.p == nil || lp.p.tty == nil {
		return agentproto.ErrProcNoTty
	}
	if err := setWinsize(lp.p.tty, size); err != nil {
		if errors.Is(err, os.ErrClosed) {
			return fmt.Errorf("%w: %w", agentproto.ErrProcExited, err)
		}
		return err
	}
	return nil
}

var _ procs.Terminal = (*localProc)(nil)

// Wait implements procs.Proc: the status once the output was drained.
func (lp *localProc) Wait() (agentproto.ExitStatus, error) {
	<-lp.done
	return lp.status, nil
}

// run pumps the output to stdout and stderr, enforces the timeout and
// ctx, and records the end like an attached exec (process.supervise).
func (lp *localProc) run(ctx context.Context, timeout time.Duration, stdout, stderr io.Writer) {
	p := lp.p
	stopCtx := context.AfterFunc(ctx, func() { _ = getReaper().signalGroup(p.child, syscall.SIGKILL) })
	defer stopCtx()
	lp.status = p.supervise(timeout, func(t agentproto.FrameType) func([]byte) {
		w := stdout
		if t == agentproto.FrameStderr {
			w = stderr
		}
		return func(b []byte) { _, _ = w.Write(b) } // the table's writers never fail
	})
	close(lp.done)
}

// untilHostCloses returns a context cancelled when the host closes its
// side of the stream (or sends anything: no frames are expected).
func untilHostCloses(st *yamux.Stream) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		var b [1]byte
		_, _ = st.Read(b[:])
	}()
	return ctx, cancel
}

// procSpawn handles OpProcSpawn.
func (s *server) procSpawn(fw *agentproto.Writer, req *agentproto.ProcSpawnRequest) error {
	// A terminal always takes input: its stdin is open for OpProcStdin.
	stdinOpen := req.Exec.Stdin || req.Exec.Tty != nil
	info, err := s.procs.table.Start(s.procs.life, req.ID, req.Exec, req.StdinData, stdinOpen, startLocal(s.opts))
	if err != nil {
		return agentproto.ProcError(err)
	}
	if info.Pid == 0 { // it could not start: answer with its end
		if info, err = s.procs.table.Wait(s.life, req.ID); err != nil {
			return agentproto.ProcError(err)
		}
	}
	return fw.WriteJSON(agentproto.FrameResponse, info)
}

// procList handles OpProcList.
func (s *server) procList(fw *agentproto.Writer, req *agentproto.ProcListRequest) error {
	var list agentproto.ProcList
	if req.ID != "" {
		info, err := s.procs.table.Get(req.ID)
		if err != nil {
			return agentproto.ProcError(err)
		}
		list.Procs = []agentproto.ProcInfo{info}
	} else {
		for _, info := range s.procs.table.List() {
			list.Procs = append(list.Procs, info)
		}
	}
	if list.Procs == nil {
		list.Procs = []agentproto.ProcInfo{}
	}
	return fw.WriteJSON(agentproto.FrameResponse, list)
}

// procWait handles OpProcWait; the host's closing the stream ends the wait.
func (s *server) procWait(st *yamux.Stream, fw *agentproto.Writer, req *agentproto.ProcRef) error {
	ctx, cancel := untilHostCloses(st)
	defer cancel()
	info, err := s.procs.table.Wait(ctx, req.ID)
	if err != nil {
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, info)
}

// procOutput handles OpProcOutput.
func (s *server) procOutput(st *yamux.Stream, fw *agentproto.Writer, req *agentproto.ProcOutputRequest) error {
	ctx, cancel := untilHostCloses(st)
	defer cancel()
	next := req.Offset
	var buf []byte
	info, err := s.procs.table.Output(ctx, req.ID, req.Offset, req.Follow, func(c procs.Chunk) error {
		stream := agentproto.ProcStdout
		if c.Stream == procs.StreamStderr {
			stream = agentproto.ProcStderr
		}
		buf = agentproto.AppendProcChunk(buf[:0], agentproto.ProcChunk{Stream: stream, Offset: c.Offset, Data: c.Data})
		if err := fw.WriteFrame(agentproto.FrameProcOutput, buf); err != nil {
			return err
		}
		next = c.Offset + int64(len(c.Data))
		return nil
	})
	end := agentproto.ProcOutputEnd{Info: info, Next: next}
	var de *agentproto.ProcDroppedError
	switch {
	case errors.As(err, &de):
		end.Dropped, end.Next = true, de.Offset
	case err != nil && ctx.Err() != nil:
		return nil // the host went away
	case err != nil:
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, end)
}

// stdinFrames reads the FrameStdin payloads of an OpProcStdin stream
// until FrameDataEnd (then io.EOF).
type stdinFrames struct {
	fr   *agentproto.Reader
	rest []byte
	done bool
}

// Read implements io.Reader.
func (r *stdinFrames) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.done {
			return 0, io.EOF
		}
		t, b, err := r.fr.ReadFrame()
		if err != nil {
			return 0, fmt.Errorf("read stdin frames: %w", err)
		}
		switch t {
		case agentproto.FrameStdin:
			r.rest = b
		case agentproto.FrameDataEnd:
			r.done = true
		default:
			return 0, fmt.Errorf("unexpected %s frame in proc-stdin", t)
		}
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// procStdin handles OpProcStdin. The write is bounded by the session: a
// host that gives up closes the stream, which ends the frame reader.
func (s *server) procStdin(fr *agentproto.Reader, fw *agentproto.Writer, req *agentproto.ProcStdinRequest) error {
	n, err := s.procs.table.WriteStdin(s.life, req.ID, &stdinFrames{fr: fr}, req.Close)
	if err != nil {
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.ProcStdinResult{Bytes: n})
}

// procSignal handles OpProcSignal.
func (s *server) procSignal(fw *agentproto.Writer, req *agentproto.ProcSignalRequest) error {
	if err := s.procs.table.Signal(s.life, req.ID, syscall.Signal(req.Signal)); err != nil {
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

// procForget handles OpProcForget.
func (s *server) procForget(fw *agentproto.Writer, req *agentproto.ProcRef) error {
	if err := s.procs.table.Forget(req.ID); err != nil {
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}

// procResize handles OpProcResize.
func (s *server) procResize(fw *agentproto.Writer, req *agentproto.ProcResizeRequest) error {
	info, err := s.procs.table.Resize(req.ID, req.Tty)
	if err != nil {
		return agentproto.ProcError(err)
	}
	return fw.WriteJSON(agentproto.FrameResponse, info)
}
