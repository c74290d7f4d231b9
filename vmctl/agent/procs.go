package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Detached processes kept by the guest agent (agentproto's proc-*
// operations): they outlive this client, and any later client finds them
// by the id given at spawn. Errors of every method: *agentproto.Error
// (CodeNotFound for an unknown id, CodeProcExited, CodeStdinClosed,
// CodeProcLimit, CodeExists, CodeProcRunning), ErrDisconnected, ctx.Err().

// SpawnProcess starts req detached in the guest under id and returns its
// first ProcInfo (running, or exited with Exit.ErrorKind when it could not
// start). stdinData is written to its stdin first; with stdinOpen the
// stdin stays open for WriteProcessStdin, else EOF follows.
func (c *Client) SpawnProcess(ctx context.Context, id string, req agentproto.ExecRequest, stdinData []byte, stdinOpen bool) (agentproto.ProcInfo, error) {
	req.Stdin = stdinOpen
	r := &agentproto.Request{Op: agentproto.OpProcSpawn, ProcSpawn: &agentproto.ProcSpawnRequest{ID: id, Exec: req, StdinData: stdinData}}
	if err := r.Validate(); err != nil {
		return agentproto.ProcInfo{}, fmt.Errorf("agent: proc-spawn: %w", err)
	}
	var info agentproto.ProcInfo
	err := c.call(ctx, "proc-spawn "+id, r, &info)
	return info, err
}

// ListProcesses returns the guest's detached processes, oldest first.
// Errors: ErrTooLarge (none returned) when the guest reports more than
// MaxProcs; as for every operation.
func (c *Client) ListProcesses(ctx context.Context) ([]agentproto.ProcInfo, error) {
	var list agentproto.ProcList
	if err := c.call(ctx, "proc-list", &agentproto.Request{Op: agentproto.OpProcList, ProcList: &agentproto.ProcListRequest{}}, &list); err != nil {
		return nil, err
	}
	if n := len(list.Procs); n > MaxProcs {
		return nil, fmt.Errorf("agent: proc-list: %w", tooLarge(fmt.Sprintf("the guest reported %d detached processes", n), n, MaxProcs, "an agent keeps at most that many: the guest agent is not agentbox's"))
	}
	return list.Procs, nil
}

// GetProcess returns detached process id.
func (c *Client) GetProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	var list agentproto.ProcList
	err := c.call(ctx, "proc-list "+id, &agentproto.Request{Op: agentproto.OpProcList, ProcList: &agentproto.ProcListRequest{ID: id}}, &list)
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	if len(list.Procs) != 1 {
		return agentproto.ProcInfo{}, fmt.Errorf("agent: proc-list %s: the guest answered %d processes", id, len(list.Procs))
	}
	return list.Procs[0], nil
}

// WaitProcess waits until detached process id ended and returns its final
// ProcInfo; when ctx ends it stops waiting (the process runs on).
func (c *Client) WaitProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	var info agentproto.ProcInfo
	err := c.call(ctx, "proc-wait "+id, &agentproto.Request{Op: agentproto.OpProcWait, Proc: &agentproto.ProcRef{ID: id}}, &info)
	return info, err
}

// ProcessOutput passes detached process id's output from byte offset on
// to emit, in order, each chunk with its stream and offset (Data is valid
// only during the call). Without follow it returns after what the guest
// keeps now; with follow it waits for more until the process ended and
// all its output was passed, or ctx ends. The ProcOutputEnd says where it
// stopped and whether output was dropped (ProcOutputEnd.Dropped: offset
// Next is older than the guest's ring). emit's error is returned as is.
func (c *Client) ProcessOutput(ctx context.Context, id string, offset int64, follow bool, emit func(agentproto.ProcChunk) error) (agentproto.ProcOutputEnd, error) {
	name := "proc-output " + id
	o, err := c.open(ctx, name, &agentproto.Request{Op: agentproto.OpProcOutput, ProcOutput: &agentproto.ProcOutputRequest{ID: id, Offset: offset, Follow: follow}})
	if err != nil {
		return agentproto.ProcOutputEnd{}, err
	}
	defer o.close() // tells a following guest to stop
	for {
		t, b, err := o.fr.ReadFrame()
		if err != nil {
			return agentproto.ProcOutputEnd{}, o.err(err)
		}
		if t != agentproto.FrameProcOutput {
			var end agentproto.ProcOutputEnd
			if err := agentproto.DecodeFrame(t, b, agentproto.FrameResponse, &end); err != nil {
				return agentproto.ProcOutputEnd{}, o.err(err)
			}
			return end, nil
		}
		ch, err := agentproto.DecodeProcChunk(b)
		if err != nil {
			return agentproto.ProcOutputEnd{}, o.err(err)
		}
		if err := emit(ch); err != nil {
			return agentproto.ProcOutputEnd{}, err
		}
	}
}

// WriteProcessStdin copies r to detached process id's stdin and then, with
// closeAfter, closes it; r nil writes nothing. It returns the bytes the
// command's stdin accepted. When ctx ends first it returns the bytes sent
// so far (the last chunk may still be pending in the guest) and the stdin
// stays open; r's error is returned wrapped.
func (c *Client) WriteProcessStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	name := "proc-stdin " + id
	o, err := c.open(ctx, name, &agentproto.Request{Op: agentproto.OpProcStdin, ProcStdin: &agentproto.ProcStdinRequest{ID: id, Close: closeAfter}})
	if err != nil {
		return 0, err
	}
	defer o.close()
	// The guest may refuse at once (exited, stdin closed): its answer
	// ends the stream while frames are still being sent.
	answer := make(chan struct{})
	var res agentproto.ProcStdinResult
	var rerr error
	go func() {
		defer close(answer)
		rerr = o.fr.ReadJSON(agentproto.FrameResponse, &res)
	}()
	var sent int64
	if r != nil {
		buf := make([]byte, agentproto.ChunkSize)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				if werr := o.fw.WriteFrame(agentproto.FrameStdin, buf[:n]); werr != nil {
					break // the answer (or the failure) tells
				}
				sent += int64(n)
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				_ = o.st.Close()
				<-answer
				return sent, fmt.Errorf("agent: %s: read the data: %w", name, err)
			}
		}
	}
	_ = o.fw.WriteFrame(agentproto.FrameDataEnd, nil)
	<-answer
	if rerr != nil {
		err := o.err(rerr)
		if ctx.Err() != nil {
			return sent, err
		}
		return 0, err
	}
	return res.Bytes, nil
}

// SignalProcess sends sig to detached process id's process group.
// Errors: CodeProcExited once it ended.
func (c *Client) SignalProcess(ctx context.Context, id string, sig syscall.Signal) error {
	return c.call(ctx, "proc-signal "+id, &agentproto.Request{Op: agentproto.OpProcSignal, ProcSignal: &agentproto.ProcSignalRequest{ID: id, Signal: int(sig)}}, nil)
}

// ResizeProcess sets the terminal size of detached process id (started
// with ExecRequest.Tty) and returns its ProcInfo with the new size.
// Errors: CodeNoTty for a process without a terminal, CodeProcExited,
// CodeNotFound.
func (c *Client) ResizeProcess(ctx context.Context, id string, size agentproto.TtySize) (agentproto.ProcInfo, error) {
	r := &agentproto.Request{Op: agentproto.OpProcResize, ProcResize: &agentproto.ProcResizeRequest{ID: id, Tty: size}}
	if err := r.Validate(); err != nil {
		return agentproto.ProcInfo{}, fmt.Errorf("agent: proc-resize: %w", err)
	}
	var info agentproto.ProcInfo
	err := c.call(ctx, "proc-resize "+id, r, &info)
	return info, err
}

// ForgetProcess drops ended detached process id with its output and
// status. Errors: CodeProcRunning while it runs.
func (c *Client) ForgetProcess(ctx context.Context, id string) error {
	return c.call(ctx, "proc-forget "+id, &agentproto.Request{Op: agentproto.OpProcForget, Proc: &agentproto.ProcRef{ID: id}}, nil)
}

// IsProcCode reports whether err is a guest error with code.
func IsProcCode(err error, code agentproto.ErrorCode) bool {
	var pe *agentproto.Error
	return errors.As(err, &pe) && pe.Code == code
}
