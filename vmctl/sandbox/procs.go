package sandbox

import (
	"context"
	"io"
	"syscall"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// The guest agent's detached processes (agent.Client's proc-* methods),
// through the sandbox: each fails with ErrNotRunning unless the sandbox
// runs, and a dead guest's error is explained. vmctl/process's Table is
// built on them (Sandbox is a process.Guest). None does accounting.

// guestProcs is a sandbox's detached processes in its guest, the methods
// below. It is a part of the Sandbox it points to (linked).
type guestProcs struct{ *Sandbox }

// SpawnProcess starts req detached under id (agent.Client.SpawnProcess).
func (sb *guestProcs) SpawnProcess(ctx context.Context, id string, req agentproto.ExecRequest, stdinData []byte, stdinOpen bool) (agentproto.ProcInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	info, err := c.SpawnProcess(ctx, id, req, stdinData, stdinOpen)
	return info, sb.explain(ctx, err)
}

// ListProcesses lists the guest's detached processes.
func (sb *guestProcs) ListProcesses(ctx context.Context) ([]agentproto.ProcInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return nil, err
	}
	list, err := c.ListProcesses(ctx)
	return list, sb.explain(ctx, err)
}

// GetProcess returns detached process id.
func (sb *guestProcs) GetProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	info, err := c.GetProcess(ctx, id)
	return info, sb.explain(ctx, err)
}

// WaitProcess waits for detached process id's end.
func (sb *guestProcs) WaitProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	info, err := c.WaitProcess(ctx, id)
	return info, sb.explain(ctx, err)
}

// ProcessOutput passes detached process id's output from offset to emit
// (agent.Client.ProcessOutput); emit's error is returned as is.
func (sb *guestProcs) ProcessOutput(ctx context.Context, id string, offset int64, follow bool, emit func(agentproto.ProcChunk) error) (agentproto.ProcOutputEnd, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ProcOutputEnd{}, err
	}
	var emitErr error
	end, err := c.ProcessOutput(ctx, id, offset, follow, func(ch agentproto.ProcChunk) error {
		emitErr = emit(ch)
		return emitErr
	})
	if err != nil && err == emitErr {
		return end, err
	}
	return end, sb.explain(ctx, err)
}

// WriteProcessStdin copies r to detached process id's stdin.
func (sb *guestProcs) WriteProcessStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	c, err := sb.agentFor()
	if err != nil {
		return 0, err
	}
	n, err := c.WriteProcessStdin(ctx, id, r, closeAfter)
	return n, sb.explain(ctx, err)
}

// SignalProcess signals detached process id's process group.
func (sb *guestProcs) SignalProcess(ctx context.Context, id string, sig syscall.Signal) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return sb.explain(ctx, c.SignalProcess(ctx, id, sig))
}

// ResizeProcess sets detached process id's terminal size.
func (sb *guestProcs) ResizeProcess(ctx context.Context, id string, size agentproto.TtySize) (agentproto.ProcInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ProcInfo{}, err
	}
	info, err := c.ResizeProcess(ctx, id, size)
	return info, sb.explain(ctx, err)
}

// ForgetProcess drops ended detached process id in the guest.
func (sb *guestProcs) ForgetProcess(ctx context.Context, id string) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return sb.explain(ctx, c.ForgetProcess(ctx, id))
}
