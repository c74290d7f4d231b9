package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ backend.ProcessTerminalBackend = (*Daemon)(nil)

// attachStdinChunk is the most stdin bytes one write to an attached
// process carries (one proc-stdin request to the guest).
const attachStdinChunk = 32 << 10

// ResizeProcess implements backend.ProcessTerminalBackend.
func (s *execService) ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error) {
	if err := size.Validate(); err != nil {
		return api.Process{}, err
	}
	b, err := s.procs(ctx, ref)
	if err != nil {
		return api.Process{}, err
	}
	info, err := b.procs.Resize(ctx, pid, agentproto.TtySize{Rows: uint16(size.Rows), Cols: uint16(size.Cols)})
	if err != nil {
		return api.Process{}, pausedErr(b.sb, err)
	}
	return apiProcess(info), nil
}

// AttachProcess implements backend.ProcessTerminalBackend on the process
// table: output through Output from the offset on (a dropped range is
// reported and skipped), stdin through WriteStdin piece by piece (so that
// other writers and attached clients interleave, and a detach leaves
// nothing pending), resize and signal through procControl. The session
// is one audit entry (process.attach) with its stdin digest and, on a
// terminal, the recorded session for `audit --replay`.
func (s *execService) AttachProcess(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
	b, err := s.procs(ctx, ref)
	if err != nil {
		return api.ExitStatus{}, err
	}
	if b.sb.State() == sandbox.StatePaused {
		// Refused before the session starts, with the hint (?resume=true
		// resumed it before this call).
		if _, err := b.procs.Get(ctx, pid); err != nil {
			return api.ExitStatus{}, err
		}
		return api.ExitStatus{}, sandbox.ErrNotRunning.WithMessage(pausedMessage(b.sb))
	}
	info, err := b.procs.Get(ctx, pid)
	if err != nil {
		return api.ExitStatus{}, err
	}
	offset := info.OutputBytes
	if at.Offset != nil {
		offset = *at.Offset
	}
	from, start := offset, time.Now()
	var rec *audit.TtyRecorder
	if info.Tty != nil {
		rec = audit.NewTtyRecorder(int(info.Tty.Rows), int(info.Tty.Cols), s.cfg.AuditFullTty)
	}
	ctl := &procControl{s: s, b: b, id: pid, pid: info.Pid, rec: rec}
	at.Started(ctl, apiProcess(info), offset)

	// A stdin failure (stdin closed) ends the session with its error.
	outCtx, stopOut := context.WithCancel(ctx)
	defer stopOut()
	in := &countingReader{r: at.Stdin, tty: rec}
	var stdinErr error
	stdinDone := make(chan struct{})
	if at.Stdin != nil {
		go func() {
			defer close(stdinDone)
			if err := s.forwardStdin(outCtx, b, pid, in); err != nil {
				stdinErr = err
				stopOut()
			}
		}()
	} else {
		close(stdinDone)
	}

	out := &countingWriter{w: at.Stdout}
	var stdout io.Writer = out
	if rec != nil {
		stdout = ttyWriter{w: out, rec: rec}
	}
	for {
		info, err = b.procs.Output(outCtx, pid, offset, true, func(c process.Chunk) error {
			w := stdout
			if c.Stream == process.StreamStderr {
				w = at.Stderr
			}
			if _, err := w.Write(c.Data); err != nil {
				return err
			}
			offset = c.Offset + int64(len(c.Data))
			return nil
		})
		var de *process.DroppedError
		if errors.As(err, &de) && de.Dropped > de.Offset {
			at.Dropped(de.Offset, de.Dropped-de.Offset)
			offset = de.Dropped
			continue
		}
		break
	}
	stopOut()
	select {
	case <-stdinDone:
		if stdinErr != nil && ctx.Err() == nil {
			err = stdinErr
		}
	default: // blocked reading the client's stdin: it ends with the session
	}

	var status api.ExitStatus
	end := "detached"
	switch {
	case err != nil && ctx.Err() != nil:
		err = ctx.Err()
	case err != nil:
		end, err = "error", pausedErr(b.sb, err)
		if lost, ok := s.lostWithStop(ctx, b, pid); ok {
			end, err = "lost", lostError(b.sb, pid, lost)
		}
	case info.Exit != nil:
		end, status = "exited", apiStatus(*info.Exit, info.EndedAt.Sub(info.StartedAt))
	case info.State == process.StateLost:
		end, err = "lost", lostError(b.sb, pid, info) // procs.go
	default:
		err = fmt.Errorf("process %s: output ended while it runs", pid)
	}
	audited := err
	if end == "detached" {
		audited = nil // the client left; the process runs on
	}
	e := s.requestEntry(ctx, b.sb.ID, audit.ActionProcessAttach, map[string]any{"offset": from, "end": end}, start, audited)
	e.ExecID, e.BytesIn, e.Stdin, e.BytesOut, e.Stdout = pid, in.n.Load(), in.digest.Digest(), out.n.Load(), out.digest.Digest()
	if rec != nil {
		e.Tty = rec.Session()
	}
	s.appendAudit(e)
	s.metrics.bytes.WithLabelValues("in", "stdio").Add(float64(e.BytesIn))
	return status, err
}

// forwardStdin writes what the client sends to the process's stdin, one
// read at a time, until the client's EOF (the process's stdin stays open)
// or ctx's end. Errors: WriteStdin's, except that of a process that ended
// (its exit follows).
func (s *execService) forwardStdin(ctx context.Context, b *box, pid string, r io.Reader) error {
	buf := make([]byte, attachStdinChunk)
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := b.procs.WriteStdin(ctx, pid, bytes.NewReader(buf[:n]), false); err != nil {
				if errors.Is(err, process.ErrExited) || ctx.Err() != nil {
					return nil
				}
				return err
			}
			b.sb.Touch()
		}
		if rerr != nil {
			return nil // EOF: this client's input ended
		}
	}
}

// procControl is backend.ExecControl on an attached detached process.
type procControl struct {
	s   *execService
	b   *box
	id  string
	pid int
	rec *audit.TtyRecorder // nil without a terminal
}

var _ backend.ExecControl = (*procControl)(nil)

func (c *procControl) ExecID() string { return c.id }
func (c *procControl) Pid() int       { return c.pid }

// Resize implements backend.ExecControl as ResizeProcess; the new size
// is recorded in the session's audit.
func (c *procControl) Resize(size api.TtySize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), process.KillTimeout)
	defer cancel()
	_, err := c.b.procs.Resize(ctx, c.id, agentproto.TtySize{Rows: uint16(size.Rows), Cols: uint16(size.Cols)})
	switch {
	case errors.Is(err, process.ErrExited):
		return nil // its exit follows
	case err != nil:
		return err
	}
	if c.rec != nil {
		c.rec.Resize(size.Rows, size.Cols)
	}
	return nil
}

// Signal implements backend.ExecControl as KillProcess (audited).
func (c *procControl) Signal(ctx context.Context, signal string) error {
	if signal == "" {
		return errdefs.ErrInvalidArgument.WithMessage("signal is empty: give a name like INT or TERM, or a number 1-64")
	}
	if err := c.s.KillProcess(ctx, c.b.sb.ID, c.id, signal); err != nil && !errors.Is(err, process.ErrExited) {
		return err
	}
	return nil
}
