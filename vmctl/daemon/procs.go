package daemon

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/store"
)

var _ process.Guest = (*sandbox.Sandbox)(nil)

// adoptTimeout bounds the listing of one sandbox's detached processes at
// start-up.
const adoptTimeout = 10 * time.Second

// adoptProcesses takes over the detached processes the guest agents of
// running (adopted) sandboxes kept while no daemon was connected (see
// adopted). Those of paused sandboxes are taken over when they resume
// (resumeProcesses): their guest cannot answer before.
func (s *execService) adoptProcesses(ctx context.Context) {
	for _, b := range s.allBoxes() {
		if b.sb.State() != sandbox.StateRunning {
			continue
		}
		actx, cancel := context.WithTimeout(ctx, adoptTimeout)
		n := 0
		err := b.procs.Adopt(actx, s.adopted(b, &n))
		cancel()
		if err != nil {
			s.log.Warn("adopt detached processes", "sandbox", b.sb.ID, "err", err)
			if errors.Is(err, agent.ErrTooLarge) {
				s.auditRefusedProcs(b.sb, err) // audit.go
			}
			continue
		}
		if n > 0 {
			s.log.Info("detached processes adopted", "sandbox", b.sb.ID, "count", n)
		}
	}
}

// adopted is the process table's adopt callback for b: running processes
// are watched again (and keep their sandbox busy, as when they were
// started), ended ones get their audit entry and history end unless a
// previous daemon recorded them (the exec history says so). A previous
// daemon killed between processExited's audit entry and its history
// write left the entry: the history is ended here, with no second entry.
// It counts the processes taken over in n.
func (s *execService) adopted(b *box, n *int) func(process.Info) bool {
	var audited map[string]time.Time // exec ID → its latest process.exit entry, read once when needed
	return func(info process.Info) bool {
		if info.State != process.StateRunning {
			if h, err := s.store.Exec(b.sb.ID, info.ID); err == nil && !h.EndedAt.IsZero() {
				return true
			}
			if audited == nil {
				audited = s.auditedExits(b.sb.ID)
			}
			// An entry from before the process started would be another
			// command's under a reused ID (its clock may be the guest's:
			// a minute's leeway).
			if at, ok := audited[info.ID]; ok && !at.Before(info.StartedAt.Add(-time.Minute)) {
				_, h, _ := s.processEnd(b, info)
				if err := s.store.PutExec(h); err != nil && !errors.Is(err, store.ErrNotFound) {
					s.log.Warn("store exec history", "sandbox", b.sb.ID, "exec", h.ID, "err", err)
				}
				return true
			}
		}
		*n++
		b.sb.Busy() // ended by processExited's endExec
		return false
	}
}

// auditedExits returns the time of the latest process.exit audit entry of
// each exec ID of sandbox id. A log that cannot be read gives none (an end
// may then be audited twice, never lost).
func (s *execService) auditedExits(id string) map[string]time.Time {
	ids := map[string]time.Time{}
	err := s.audit.Read(audit.Filter{Sandbox: id, Actions: []string{audit.ActionProcessExit}}, func(e audit.Entry) error {
		if e.Time.After(ids[e.ExecID]) {
			ids[e.ExecID] = e.Time
		}
		return nil
	})
	if err != nil {
		s.log.Warn("read the audit log for ended processes", "sandbox", id, "err", err)
	}
	return ids
}

// suspendProcesses stops following b's detached processes before its
// sandbox is paused to disk: the agent connection goes with the domain,
// but the processes are saved with the guest's memory and continue on
// resume, so they must not be recorded as lost.
func (s *execService) suspendProcesses(b *box) {
	b.procs.Suspend()
}

// resumeProcesses follows b's detached processes again once its sandbox
// runs after a resume: those the table knew (suspended at a pause to
// disk), and those a daemon restarted while the sandbox was paused has
// not adopted yet. Failures are logged: the processes run on in the
// guest, and the next daemon start adopts them.
func (s *execService) resumeProcesses(ctx context.Context, b *box) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
	defer cancel()
	n := 0
	if err := b.procs.Resume(actx, s.adopted(b, &n)); err != nil {
		s.log.Warn("follow detached processes after resume", "sandbox", b.sb.ID, "err", err)
		if errors.Is(err, agent.ErrTooLarge) {
			s.auditRefusedProcs(b.sb, err) // audit.go
		}
		return
	}
	if n > 0 {
		s.log.Info("detached processes adopted", "sandbox", b.sb.ID, "count", n)
	}
}

// endUnadopted ends, as lost with reason, the detached processes of
// sandbox id whose history entry is still open once it stopped: those a
// daemon restarted while the sandbox was paused never adopted
// (closeLostExecs leaves them for the resume, which did not come). Like
// processExited for the table's own (CloseAll ended them): the history
// entry and one process.exit audit entry.
func (s *execService) endUnadopted(id, reason string) {
	execs, err := s.store.Execs(id, 0)
	if err != nil {
		return
	}
	now := time.Now().UTC()
	for _, e := range execs {
		if !e.Detached || !e.EndedAt.IsZero() {
			continue
		}
		e.EndedAt, e.Error = now, reason
		if err := s.store.PutExec(e); err != nil {
			s.log.Warn("close lost exec", "sandbox", id, "exec", e.ID, "err", err)
		}
		ae := auditEntry(now, id, "daemon", audit.ActionProcessExit, map[string]any{"cmd": e.Cmd})
		ae.ExecID, ae.DurationMs, ae.Error, ae.ErrorMessage = e.ID, ms(now.Sub(e.StartedAt)), "lost", reason
		s.appendAudit(ae)
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
func (s *execService) followPaused(ctx context.Context, sb *sandbox.Sandbox) bool {
	events, unsubscribe := s.events.subscribe() // before the look, so no change is missed
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
func (s *execService) dropInheritedProcesses(ctx context.Context, sb *sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
	defer cancel()
	list, err := sb.ListProcesses(ctx)
	if err != nil {
		s.log.Warn("list inherited detached processes", "sandbox", sb.ID, "err", err)
		return
	}
	for _, p := range list {
		if p.State == process.StateRunning {
			_ = sb.SignalProcess(ctx, p.ID, syscall.SIGKILL)
			if _, err := sb.WaitProcess(ctx, p.ID); err != nil {
				s.log.Warn("inherited detached process did not end", "sandbox", sb.ID, "process", p.ID, "err", err)
				continue
			}
		}
		if err := sb.ForgetProcess(ctx, p.ID); err != nil {
			s.log.Warn("forget inherited detached process", "sandbox", sb.ID, "process", p.ID, "err", err)
		}
	}
}

// pausedErr gives err, from a call on a detached process of sb, the
// resume hint when sb is paused (in memory, or to disk: its guest cannot
// answer until it is resumed): the same 409 an exec gets.
func pausedErr(sb *sandbox.Sandbox, err error) error {
	if err != nil && errors.Is(err, sandbox.ErrNotRunning) && sb.State() == sandbox.StatePaused {
		return sandbox.ErrNotRunning.WithMessage(pausedMessage(sb)) // lifecycle.go
	}
	return err
}

// lostWaitTimeout bounds how long a follower whose stream broke waits for
// the process table to end the process with its sandbox's stop.
const lostWaitTimeout = 5 * time.Second

// lostWithStop waits, for a follower of process pid whose output stream
// broke, until b's process table ends it when its sandbox is stopping or
// stopped (CloseAll marks it lost), and returns its final Info; false
// when the sandbox was not stopping or the process did not end lost.
func (s *execService) lostWithStop(ctx context.Context, b *box, pid string) (process.Info, bool) {
	if st := b.sb.State(); st != sandbox.StateStopping && !st.Final() {
		return process.Info{}, false
	}
	wctx, cancel := context.WithTimeout(ctx, lostWaitTimeout)
	defer cancel()
	info, err := b.procs.Wait(wctx, pid)
	return info, err == nil && info.State == process.StateLost
}

// lostError is the error event of a follower whose process info was lost:
// with its sandbox's stop (409 sandbox_not_running: nothing is left to
// resume from, the output went with the guest), or with its guest
// (503 guest_died).
func lostError(sb *sandbox.Sandbox, pid string, info process.Info) error {
	r := sb.Record()
	if r.State == sandbox.StateStopping || r.State == sandbox.StateStopped {
		why := string(r.State)
		if r.Reason != "" {
			why += ": " + r.Reason
		}
		return sandbox.ErrNotRunning.WithMessage(fmt.Sprintf("process %s was lost with the sandbox's stop (sandbox %s %s): its output and exit status went with the guest; start the sandbox again (agentbox start %s) and run the command anew", pid, sb.ID, why, sb.ID))
	}
	return sandbox.ErrGuestDied.WithMessage("process lost: " + info.Error)
}

// saveProcesses writes what b's table knows of its running detached
// processes (asking the guest, which still runs) into their exec history
// entries (store.Exec.Last) before its sandbox is paused: a daemon
// restarted while it is paused recalls them from there
// (recallProcesses). Failures are logged: a daemon that restarts then
// lists the processes with less (no pid or offsets), or after the
// resume.
func (s *execService) saveProcesses(ctx context.Context, b *box) {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adoptTimeout)
	defer cancel()
	for _, in := range b.procs.List(lctx) {
		if in.State != process.StateRunning {
			continue
		}
		h, err := s.store.Exec(b.sb.ID, in.ID)
		if err != nil {
			h = store.Exec{ID: in.ID, Sandbox: b.sb.ID, Cmd: in.Argv, Detached: true, StartedAt: in.StartedAt.UTC()}
		}
		if !h.EndedAt.IsZero() {
			continue
		}
		h.Last = &store.ProcState{Pid: in.Pid, StdinOpen: in.StdinOpen, OutputBytes: in.OutputBytes, OutputDropped: in.OutputDropped}
		if in.Tty != nil {
			h.Last.TtyRows, h.Last.TtyCols = int(in.Tty.Rows), int(in.Tty.Cols)
		}
		if err := s.store.PutExec(h); err != nil {
			s.log.Warn("save detached process with the pause", "sandbox", b.sb.ID, "exec", in.ID, "err", err)
		}
	}
}

// recallProcesses fills the process table of b, whose sandbox is paused
// at start-up, with the detached processes its exec history says were
// running when it was paused (saveProcesses; without Last: what the
// history has): the guest cannot be asked before the resume, which
// follows them again (resumeProcesses). Each keeps the sandbox busy, as
// a followed process does, until processExited.
func (s *execService) recallProcesses(b *box) {
	execs, err := s.store.Execs(b.sb.ID, 0)
	if err != nil {
		return
	}
	var infos []process.Info
	for _, e := range execs {
		if !e.Detached || !e.EndedAt.IsZero() {
			continue
		}
		in := process.Info{ID: e.ID, Argv: e.Cmd, State: process.StateRunning, StartedAt: e.StartedAt}
		if l := e.Last; l != nil {
			in.Pid, in.StdinOpen, in.OutputBytes, in.OutputDropped = l.Pid, l.StdinOpen, l.OutputBytes, l.OutputDropped
			if l.TtyRows > 0 {
				in.Tty = &agentproto.TtySize{Rows: uint16(l.TtyRows), Cols: uint16(l.TtyCols)}
			}
		}
		infos = append(infos, in)
	}
	if len(infos) == 0 {
		return
	}
	b.procs.Recall(infos)
	for range infos {
		b.sb.Busy() // ended by processExited's endExec
	}
	s.log.Info("detached processes recalled from the pause", "sandbox", b.sb.ID, "count", len(infos))
}

// closeLostExecs ends the history entries of commands that were running
// when the previous daemon stopped: attached ones' agent streams ended
// with it, so the guest killed them; detached ones the guest no longer
// keeps (adoptProcesses took over the others). A paused sandbox's
// detached ones are left open: its guest keeps them, and they are
// adopted when it resumes (resumeProcesses).
func (s *execService) closeLostExecs() {
	now := time.Now().UTC()
	for _, sb := range s.mgr.List() {
		execs, err := s.store.Execs(sb.ID, 0)
		if err != nil {
			continue
		}
		b := s.box(sb.ID)
		for _, e := range execs {
			if !e.EndedAt.IsZero() {
				continue
			}
			if b != nil && e.Detached {
				if sb.State() == sandbox.StatePaused {
					continue // adopted on resume
				}
				if _, err := b.procs.Get(context.Background(), e.ID); err == nil {
					continue // adopted: its end is recorded when it comes
				}
			}
			e.EndedAt, e.Error = now, "lost: the daemon stopped while it ran"
			if err := s.store.PutExec(e); err != nil {
				s.log.Warn("close lost exec", "sandbox", sb.ID, "exec", e.ID, "err", err)
			}
		}
	}
}
