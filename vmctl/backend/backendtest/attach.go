package backendtest

import (
	"context"
	"io"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// TerminalFns are the functions of the fake's process terminal methods
// (see Fake.Terminals); nil ones answer as documented on each method.
type TerminalFns struct {
	ResizeFn func(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error)
	AttachFn func(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error)
}

var _ backend.ProcessTerminalBackend = (*Fake)(nil)

// ResizeProcess implements backend.ProcessTerminalBackend; by default it
// answers Process(pid) with the new size.
func (b *Fake) ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error) {
	b.record("ResizeProcess", ref)
	if b.Terminals.ResizeFn != nil {
		return b.Terminals.ResizeFn(ctx, ref, pid, size)
	}
	if b.Memory != nil {
		return b.Memory.resizeProcess(ref, pid, size)
	}
	p := Process(pid)
	p.Tty = &size
	return p, nil
}

// AttachProcess implements backend.ProcessTerminalBackend; by default
// it starts (Process(pid) on a 24x80 terminal, controls in a *Control,
// output from offset 0 or the given one), echoes stdin to stdout until its
// EOF and then reports the process exited with 0.
func (b *Fake) AttachProcess(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
	b.record("AttachProcess", ref)
	if b.Terminals.AttachFn != nil {
		return b.Terminals.AttachFn(ctx, ref, pid, at)
	}
	if b.Memory != nil {
		return b.Memory.attachProcess(ctx, ref, pid, at)
	}
	p := Process(pid)
	p.Tty = &api.TtySize{Rows: 24, Cols: 80}
	var offset int64
	if at.Offset != nil {
		offset = *at.Offset
	}
	at.Started(&Control{ID: pid, PID: p.Pid, Tty: true}, p, offset)
	if _, err := io.Copy(at.Stdout, at.Stdin); err != nil {
		return api.ExitStatus{}, err
	}
	return api.ExitStatus{ExitCode: 0, DurationMs: 5}, nil
}
