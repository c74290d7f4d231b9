package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// KillGrace is how long Wait waits for the exit status after ctx ended and
// the command's process group was sent SIGKILL.
const KillGrace = 2 * time.Second

// ErrProcessDone is returned by Process.Signal when the command has exited.
var ErrProcessDone = errdefs.New(errdefs.ErrFailedPrecondition, "", "agent: process already finished")

// Process is a command running in the guest, started by Client.Start.
type Process struct {
	c      *Client
	o      *op
	ctx    context.Context
	pid    int
	tty    bool // started with req.Tty: Resize works
	stdout io.Writer
	stderr io.Writer

	done    chan struct{} // closed when status/err are final
	status  agentproto.ExitStatus
	err     error
	outErr  error // first stdout/stderr write error
	stopCtx func() bool
	once    sync.Once
	killed  atomic.Bool // ctx ended before the exit status arrived
}

// Exec runs req in the guest and waits for it, streaming stdin (nil: the
// command's stdin is /dev/null) to the command and its stdout and stderr,
// unchanged, to stdout and stderr (nil: discarded) as they arrive. It is
// Start followed by Wait; req.Stdin is set from stdin != nil.
//
// The ExitStatus is valid whenever the command ran: exit code, or the
// signal that killed it, and TimedOut for req.TimeoutMs. When the command
// could not start, the status carries ErrorKind and the error is the
// matching *agentproto.ExecError (e.g. "python4: command not found").
// When ctx ends, the guest process group is killed with SIGKILL and the
// error wraps ctx.Err() (returned after the exit status arrived, or after
// KillGrace). Other errors: stdout's or stderr's write error (the command
// still ran to completion), ErrDisconnected.
func (c *Client) Exec(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (agentproto.ExitStatus, error) {
	p, err := c.Start(ctx, req, stdin, stdout, stderr)
	if err != nil {
		return agentproto.ExitStatus{Code: -1}, err
	}
	return p.Wait()
}

// Start starts req in the guest and returns once the command runs or
// failed to start (Wait then reports how). Arguments are as for Exec;
// ctx bounds the command's whole life: when it ends the process group is
// killed. With req.Tty set the command runs on a terminal of that size
// (see agentproto.ExecRequest.Tty): all its output goes to stdout, stdin
// is the terminal's input (stdin's EOF does not end it) and Resize
// changes the size. stdin is copied by a goroutine that may still be blocked in
// stdin.Read after Wait returned. Errors: ErrDisconnected, ctx.Err(),
// *agentproto.Error with CodeInvalid for a malformed request.
func (c *Client) Start(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	req.Stdin = stdin != nil
	if err := req.Validate(); err != nil {
		return nil, fmt.Errorf("agent: exec: %w", err)
	}
	name := "exec " + req.Argv[0]
	o, err := c.open(context.WithoutCancel(ctx), name, &agentproto.Request{Op: agentproto.OpExec, Exec: &req})
	if err != nil {
		return nil, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	p := &Process{c: c, o: o, ctx: ctx, tty: req.Tty != nil, stdout: stdout, stderr: stderr, done: make(chan struct{})}

	// The first frame is FrameStarted, or FrameExit if it did not start.
	// Until then ctx's end aborts the exchange; closing our side of the
	// stream makes the guest kill the command if it started meanwhile.
	stopStart := context.AfterFunc(ctx, func() {
		_ = o.st.SetReadDeadline(time.Unix(1, 0))
		_ = o.st.Close()
	})
	t, b, err := o.fr.ReadFrame()
	if !stopStart() {
		o.close()
		return nil, fmt.Errorf("agent: %s: %w", name, ctx.Err())
	}
	switch {
	case err != nil:
		o.close()
		return nil, o.err(err)
	case t == agentproto.FrameStarted:
		var s agentproto.Started
		if err := agentproto.DecodeFrame(t, b, agentproto.FrameStarted, &s); err != nil {
			o.close()
			return nil, o.err(err)
		}
		p.pid = s.Pid
	default:
		var st agentproto.ExitStatus
		err := agentproto.DecodeFrame(t, b, agentproto.FrameExit, &st)
		o.close()
		if err != nil {
			return nil, o.err(err)
		}
		p.finish(st, st.Err())
		return p, nil
	}

	p.stopCtx = context.AfterFunc(ctx, p.kill)
	go p.receive()
	if stdin != nil {
		go p.sendStdin(stdin)
	}
	return p, nil
}

// Pid returns the guest process id of the command (also its process group
// id), or 0 if it did not start.
func (p *Process) Pid() int { return p.pid }

// Signal sends sig to the command's process group in the guest (use it to
// forward SIGINT or SIGTERM). It goes on its own stream, so it works even
// while stdin is blocked. Errors: ErrProcessDone when the command has
// exited, ErrDisconnected, ctx.Err(), *agentproto.Error.
func (p *Process) Signal(ctx context.Context, sig syscall.Signal) error {
	select {
	case <-p.done:
		return ErrProcessDone
	default:
	}
	if p.pid == 0 {
		return ErrProcessDone
	}
	err := p.c.call(ctx, "signal", &agentproto.Request{
		Op: agentproto.OpSignal, Signal: &agentproto.SignalRequest{Pid: p.pid, Signal: int(sig)},
	}, nil)
	var pe *agentproto.Error
	if errors.As(err, &pe) && pe.Code == agentproto.CodeNotFound {
		return ErrProcessDone
	}
	return err
}

// Resize sets the window size of the command's terminal (FrameResize on
// its exec stream; the guest's foreground process group gets SIGWINCH).
// Errors: *agentproto.Error with CodeInvalid when the command was started
// without a terminal (req.Tty nil) or size is not valid, ErrProcessDone
// when it has exited, the stream's error.
func (p *Process) Resize(size agentproto.TtySize) error {
	if !p.tty {
		return &agentproto.Error{Code: agentproto.CodeInvalid, Message: "resize: the command was started without a terminal (tty); only a command with a terminal has a window size"}
	}
	if err := size.Validate(); err != nil {
		return err
	}
	select {
	case <-p.done:
		return ErrProcessDone
	default:
	}
	if err := p.o.fw.WriteJSON(agentproto.FrameResize, size); err != nil {
		select {
		case <-p.done:
			return ErrProcessDone
		default:
		}
		return p.o.err(err)
	}
	return nil
}

// Tty reports whether the command runs on a terminal (started with
// req.Tty).
func (p *Process) Tty() bool { return p.tty }

// Wait waits for the command to finish and returns its status; see Exec for
// the results. It may be called several times and concurrently.
func (p *Process) Wait() (agentproto.ExitStatus, error) {
	select {
	case <-p.done:
	case <-p.ctx.Done():
		t := time.NewTimer(KillGrace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-p.done:
		if p.killed.Load() {
			return p.status, fmt.Errorf("agent: %s: %w", p.o.name, p.ctx.Err())
		}
		return p.status, p.err
	default:
		return agentproto.ExitStatus{Code: -1}, fmt.Errorf("agent: %s: %w (no exit status within %v)", p.o.name, p.ctx.Err(), KillGrace)
	}
}

// kill runs when ctx ends: SIGKILL to the process group on a separate
// stream, and closing our side of the exec stream, which the guest also
// treats as "kill".
func (p *Process) kill() {
	p.killed.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), KillGrace)
	defer cancel()
	_ = p.Signal(ctx, syscall.SIGKILL)
	_ = p.o.st.Close()
}

// finish records the final status once.
func (p *Process) finish(st agentproto.ExitStatus, err error) {
	p.once.Do(func() {
		p.status, p.err = st, err
		close(p.done)
	})
}

// receive reads the guest's frames until FrameExit.
func (p *Process) receive() {
	defer func() {
		if p.stopCtx != nil {
			p.stopCtx()
		}
		p.o.close()
	}()
	for {
		t, b, err := p.o.fr.ReadFrame()
		if err != nil {
			p.finish(agentproto.ExitStatus{Code: -1}, p.o.err(err))
			return
		}
		switch t {
		case agentproto.FrameStdout:
			p.write(p.stdout, b)
		case agentproto.FrameStderr:
			p.write(p.stderr, b)
		case agentproto.FrameExit:
			var st agentproto.ExitStatus
			if err := agentproto.DecodeFrame(t, b, t, &st); err != nil {
				p.finish(agentproto.ExitStatus{Code: -1}, p.o.err(err))
				return
			}
			var err error
			if p.outErr != nil {
				err = fmt.Errorf("agent: %s: write output: %w", p.o.name, p.outErr)
			}
			p.finish(st, err)
			return
		default:
			p.finish(agentproto.ExitStatus{Code: -1}, p.o.err(agentproto.DecodeFrame(t, b, agentproto.FrameExit, nil)))
			return
		}
	}
}

// write forwards output; after the first write error output is discarded
// but still read, so the guest command is never blocked by it.
func (p *Process) write(w io.Writer, b []byte) {
	if p.outErr != nil {
		return
	}
	if _, err := w.Write(b); err != nil {
		p.outErr = err
	}
}

// sendStdin copies stdin as FrameStdin frames, then FrameStdinClose.
func (p *Process) sendStdin(stdin io.Reader) {
	buf := make([]byte, agentproto.ChunkSize)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if p.o.fw.WriteFrame(agentproto.FrameStdin, buf[:n]) != nil {
				return // the command finished or the session broke
			}
		}
		if err != nil {
			// EOF or a read error: either way the command sees the end.
			_ = p.o.fw.WriteFrame(agentproto.FrameStdinClose, nil)
			return
		}
	}
}
