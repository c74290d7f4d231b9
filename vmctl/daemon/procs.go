package daemon

import (
	"context"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var _ process.Guest = (*sandbox.Sandbox)(nil)

// adoptTimeout bounds the listing of one sandbox's detached processes at
// start-up.
const adoptTimeout = 10 * time.Second

// adoptProcesses takes over the detached processes the guest agents of
// running (adopted) sandboxes kept while no daemon was connected (see
// adopted). Those of paused sandboxes are taken over when they resume
// (resumeProcesses): their guest cannot answer before.
func (d *Daemon) adoptProcesses(ctx context.Context) {
	for _, b := range d.allBoxes() {
		if b.sb.State() != sandbox.StateRunning {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, adoptTimeout)
		n := 0
		err := b.procs.Adopt(actx, d.adopted(b, &n))
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

// adopted is the process table's adopt callback for b: running processes
// are watched again (and keep their sandbox busy, as when they were
// started), ended ones get their audit entry and history end unless a
// previous daemon recorded them (the exec history says so). It counts
// the processes taken over in n.
func (d *Daemon) adopted(b *box, n *int) func(process.Info) bool {
	return func(info process.Info) bool {
		if info.State != process.StateRunning {
			if h, err := d.store.Exec(b.sb.ID, info.ID); err == nil && !h.EndedAt.IsZero() {
				return true
			}
		}
		*n++
		b.sb.Busy() // ended by processExited's endExec
		return false
	}
}

// suspendProcesses stops following b's detached processes before its
// sandbox is paused to disk: the agent connection goes with the domain,
// but the processes are saved with the guest's memory and continue on
// resume, so they must not be recorded as lost.
func (d *Daemon) suspendProcesses(b *box) {
	b.procs.Suspend()
}

// resumeProcesses follows b's detached processes again once its sandbox
// runs after a resume: those the table knew (suspended at a pause to
// disk), and those a daemon restarted while the sandbox was paused has
// not adopted yet. Failures are logged: the processes run on in the
// guest, and the next daemon start adopts them.
func (d *Daemon) resumeProcesses(ctx context.Context, b *box) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
	defer cancel()
	n := 0
	if err := b.procs.Resume(actx, d.adopted(b, &n)); err != nil {
		d.log.Warn("follow detached processes after resume", "sandbox", b.sb.ID, "err", err)
		return
	}
	if n > 0 {
		d.log.Info("detached processes adopted", "sandbox", b.sb.ID, "count", n)
	}
}

// endUnadopted ends, as lost with reason, the detached processes of
// sandbox id whose history entry is still open once it stopped: those a
// daemon restarted while the sandbox was paused never adopted
// (closeLostExecs leaves them for the resume, which did not come). Like
// processExited for the table's own (CloseAll ended them): the history
// entry and one process.exit audit entry.
func (d *Daemon) endUnadopted(id, reason string) {
	execs, err := d.store.Execs(id, 0)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	for _, e := range execs {
		if !e.Detached || !e.EndedAt.IsZero() {
			continue
		}
		e.EndedAt, e.Error = now, reason
		if err := d.store.PutExec(e); err != nil {
			d.log.Warn("close lost exec", "sandbox", id, "exec", e.ID, "err", err)
		}
		d.appendAudit(audit.Entry{Time: now, Sandbox: id, Caller: "daemon", Action: audit.ActionProcessExit, ExecID: e.ID,
			Args: map[string]any{"cmd": e.Cmd}, DurationMs: ms(now.Sub(e.StartedAt)), Error: "lost", ErrorMessage: reason})
	}
}

// followPaused waits, for a follower of one of sb's detached processes
// whose output stream broke or could not start (the process not adopted
// yet after a daemon restart), while sb is paused (in memory the guest
// cannot answer; to disk the agent connection went with the domain), and
// reports whether it runs again, so the follower goes on from where it
// was; false when sb was not paused, or stopped, or ctx ended, or the
// event stream ended (the follower then ends with its error, and the
// client resumes from its offset).
func (d *Daemon) followPaused(ctx context.Context, sb *sandbox.Sandbox) bool {
	events, unsubscribe := d.events.subscribe() // before the look, so no change is missed
	defer unsubscribe()
	if sb.State() != sandbox.StatePaused {
		return false
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				return false
			}
			if ev.Sandbox != sb.ID {
				continue
			}
			switch st := sb.State(); {
			case st == sandbox.StateRunning:
				return true
			case st != sandbox.StatePaused:
				return false
			}
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
