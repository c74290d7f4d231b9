package daemon

import (
	"context"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ process.Guest = (*sandbox.Sandbox)(nil)

// adoptTimeout bounds the listing of one sandbox's detached processes at
// start-up.
const adoptTimeout = 10 * time.Second

// adoptProcesses takes over the detached processes the guest agents of
// running (adopted) sandboxes kept while no daemon was connected: running
// ones are watched again (and keep their sandbox busy, as when they were
// started), ended ones get their audit entry and history end unless the
// previous daemon recorded them (the exec history says so).
func (d *Daemon) adoptProcesses(ctx context.Context) {
	for _, b := range d.allBoxes() {
		if b.sb.State() != sandbox.StateRunning {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, adoptTimeout)
		n := 0
		err := b.procs.Adopt(actx, func(info process.Info) bool {
			if info.State != process.StateRunning {
				if h, err := d.store.Exec(b.sb.ID, info.ID); err == nil && !h.EndedAt.IsZero() {
					return true
				}
			}
			n++
			b.sb.Busy() // ended by processExited's endExec
			return false
		})
		cancel()
		if err != nil {
			d.log.Warn("adopt detached processes", "sandbox", b.sb.ID, "err", err)
			continue
		}
		if n > 0 {
			d.log.Info("detached processes adopted", "sandbox", b.sb.ID, "count", n)
		}
	}
}

// dropInheritedProcesses kills and forgets the detached processes a
// restored guest kept from the snapshot's source: a restored sandbox
// starts with none (its exec ids count from 1 again, and its history is
// empty). Failures are logged: a leftover only shows in no listing.
func (d *Daemon) dropInheritedProcesses(ctx context.Context, sb *sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
	defer cancel()
	list, err := sb.ListProcesses(ctx)
	if err != nil {
		d.log.Warn("list inherited detached processes", "sandbox", sb.ID, "err", err)
		return
	}
	for _, p := range list {
		if p.State == process.StateRunning {
			_ = sb.SignalProcess(ctx, p.ID, syscall.SIGKILL)
			if _, err := sb.WaitProcess(ctx, p.ID); err != nil {
				d.log.Warn("inherited detached process did not end", "sandbox", sb.ID, "process", p.ID, "err", err)
				continue
			}
		}
		if err := sb.ForgetProcess(ctx, p.ID); err != nil {
			d.log.Warn("forget inherited detached process", "sandbox", sb.ID, "process", p.ID, "err", err)
		}
	}
}
