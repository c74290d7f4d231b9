package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// This file is the sandbox's life after its first run, on the manager's
// Pause, Resume and Start (vmctl/sandbox/pause.go): the API's pause,
// resume and start, the resume an exec, file or process call asks for
// with ?resume=true, and the idle timeout's actions other than remove.

// lifecycleService is a sandbox's life on the manager: create
// (sandboxes.go, with the cluster's CreateLocal and Room: cluster.go),
// stop, remove, start, pause and resume (lifecycle.go), the timeout
// (fork.go's SetTimeout), the reaper and the one lapse of idle and TTL
// actions (reaper.go, lifecycle.go) and the templates (templates.go).
type lifecycleService struct{ *core }

var _ backend.LifecycleBackend = (*Daemon)(nil)

// PauseSandbox implements backend.LifecycleBackend: it pauses a running
// sandbox in memory or, with req.ToDisk, to disk. Errors: 409 conflict
// when it is not running (the message says what to do).
func (s *lifecycleService) PauseSandbox(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error) {
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	err = s.pause(ctx, sb, req.ToDisk, "paused by "+api.CallerFrom(ctx).ID)
	args := map[string]any{"to_disk": req.ToDisk}
	if req.EndTTL {
		args["end_ttl"] = true
	}
	s.auditAction(ctx, sb.ID, audit.ActionPause, args, start, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	if req.EndTTL {
		sb.ClearTTL()
	}
	return s.view(sb), nil
}

// pause pauses sb through the manager. Before a pause to disk its
// detached processes are no longer followed (procs.go): they continue in
// the saved guest; a pause that fails follows them again.
func (s *lifecycleService) pause(ctx context.Context, sb *sandbox.Sandbox, toDisk bool, reason string) error {
	suspended, err := s.pauseSuspending(ctx, sb, toDisk, reason)
	s.followAgain(ctx, sb, suspended)
	return err
}

// pauseSuspending is pause without following the processes again after
// a failed pause to disk: it returns the box whose processes it stopped
// following, or nil, for followAgain.
func (s *lifecycleService) pauseSuspending(ctx context.Context, sb *sandbox.Sandbox, toDisk bool, reason string) (*box, error) {
	b := s.box(sb.ID)
	if b == nil || sb.State() != sandbox.StateRunning {
		b = nil
	} else {
		s.processes.saveProcesses(ctx, b) // procs.go: for a daemon restarted while it is paused
	}
	if !toDisk {
		return nil, s.mgr.Pause(ctx, sb, false, reason)
	}
	if b != nil {
		s.processes.suspendProcesses(b)
	}
	return b, s.mgr.Pause(ctx, sb, true, reason+" (to disk)")
}

// followAgain follows the detached processes of b (pauseSuspending's
// result; nil: none) again when its sandbox still runs: its pause to
// disk failed. Outside an idle action: adopting a process marks the
// sandbox busy, which waits for the idle action (sandbox.RunIfIdle).
func (s *lifecycleService) followAgain(ctx context.Context, sb *sandbox.Sandbox, b *box) {
	if b != nil && sb.State() == sandbox.StateRunning {
		s.processes.resumeProcesses(ctx, b)
	}
}

// ResumeSandbox implements backend.LifecycleBackend: a paused sandbox
// runs again in place. With ifPaused a sandbox that is not paused is left
// as it is and no error (the ?resume=true of an exec, file or process
// call), also when a concurrent call resumed it first. Errors: 409
// conflict when it is not paused; 429 capacity_exceeded when a sandbox
// paused to disk does not fit; 422 snapshot_unusable when its saved
// state cannot be loaded (it is failed then).
func (s *lifecycleService) ResumeSandbox(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error) {
	if err := s.adm.admitting(); err != nil {
		return api.Sandbox{}, err
	}
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	if ifPaused {
		// An idle action under way ends first (the call then resumes the
		// sandbox it paused), and none begins before the call: its idle
		// clock starts again.
		sb.KeepAwake()
		if sb.State() != sandbox.StatePaused {
			return s.view(sb), nil
		}
	}
	start := time.Now()
	r := sb.Record()
	opts := sandbox.ResumeOptions{Admit: s.adm.admit}
	if r.PausedToDisk() {
		opts.Image, opts.ImageErr = image.Load(ctx, r.ImageDir, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
	}
	args := map[string]any{"to_disk": r.PausedToDisk()}
	if ifPaused {
		args["on"] = "request"
	}
	err = s.mgr.Resume(ctx, sb, opts)
	if ifPaused && errors.Is(err, sandbox.ErrConflict) && sb.State() == sandbox.StateRunning {
		// Another call resumed it while this one waited for its turn
		// (concurrent ?resume=true calls): it runs, as asked.
		return s.view(sb), nil
	}
	s.auditAction(ctx, sb.ID, audit.ActionResume, args, start, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	s.processes.resumeProcesses(ctx, s.renewBox(sb)) // procs.go
	return s.view(sb), nil
}

// StartSandbox implements backend.LifecycleBackend: a stopped (or
// failed) sandbox boots again on its kept overlay. Errors: 409 conflict
// when it is running or paused; 422 invalid_image when its image cannot
// be loaded, 422 invalid_argument when its disk is gone or its image
// changed (sandbox.ErrCannotStart); 429 capacity_exceeded.
func (s *lifecycleService) StartSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	if err := s.adm.admitting(); err != nil {
		return api.Sandbox{}, err
	}
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	err = s.start(ctx, sb)
	s.auditAction(ctx, sb.ID, audit.ActionStart, nil, start, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	return s.view(sb), nil
}

func (s *lifecycleService) start(ctx context.Context, sb *sandbox.Sandbox) error {
	if st := sb.State(); st == sandbox.StateRunning || st == sandbox.StatePaused {
		return s.mgr.Start(ctx, sb, sandbox.StartOptions{}) // the manager's conflict error
	}
	r := sb.Record()
	img, err := image.Load(ctx, r.ImageDir, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
	if err != nil {
		return image.ErrInvalid.WithMessage(fmt.Sprintf("start sandbox %s: %v", sb.ID, err))
	}
	if err := s.mgr.Start(ctx, sb, sandbox.StartOptions{Image: img, Admit: s.adm.admit}); err != nil {
		return err
	}
	s.forwards.openRecordedPorts(s.renewBox(sb)) // ports.go
	return nil
}

// renewBox gives sb a new process table and life when its old one ended
// (a sandbox started again after it stopped; see onChange), and returns
// sb's box.
func (s *lifecycleService) renewBox(sb *sandbox.Sandbox) *box {
	if b := s.box(sb.ID); b != nil && b.life.Err() == nil {
		return b
	}
	return s.addBox(sb)
}

// pausedMessage is the 409 an exec, file or process call on a paused
// sandbox gets: what to do.
func pausedMessage(sb *sandbox.Sandbox) string {
	ref := sb.ID
	if sb.Name != "" {
		ref = sb.Name
	}
	return fmt.Sprintf("sandbox %s is paused: resume it first: agentbox resume %s (POST /v1/sandboxes/%s/resume), or pass ?resume=true (agentbox exec, cp and port: --resume)", sb.ID, ref, sb.ID)
}

// lapse takes the action of b's sandbox when its idle timeout
// (why = sandbox.ExpiredIdle, Limits.IdleAction) or its TTL
// (sandbox.ExpiredTTL, Limits.TTLAction) is reached at now: remove (the
// default, reap), stop, pause or pause-to-disk; audited as a reap with
// the action. The one path of both, with their two differences:
//
//   - The idle action runs only if the sandbox is still idle, and no
//     command or file operation begins while it runs (sandbox.RunIfIdle):
//     one that began since the check keeps it running, one that begins
//     during the action waits and finds it paused (with ?resume=true it
//     resumes it) or stopped. A failed idle action is retried after
//     another idle timeout (sandbox.Touch).
//   - The TTL is a deadline: its action does not wait for commands to
//     end, and it ends the TTL (sandbox.ClearTTL) so that the sandbox
//     stays until a new timeout or its removal (E2B's autoPause: connect
//     resumes it and sets a new timeout). A sandbox already paused or
//     stopped has nothing more to do; a failed action is logged and
//     audited, the TTL ended all the same (the sandbox is left as the
//     failure left it, never removed against its TTL action).
func (s *lifecycleService) lapse(b *box, why string, now time.Time) {
	lim := b.sb.ExecAccount().Limits
	action, idle := lim.TTLAction, why == sandbox.ExpiredIdle
	if idle {
		action = lim.IdleAction
	}
	if action == "" || action == api.IdleActionRemove {
		if idle {
			b.sb.RunIfIdle(now, func() error { s.reap(b, why); return nil })
		} else {
			s.reap(b, why)
		}
		return
	}
	ctx := context.Background()
	start := time.Now()
	var suspended *box
	act := func() (err error) {
		switch {
		case !idle && b.sb.State() != sandbox.StateRunning:
			return nil // already paused or stopped: the TTL's end is all there is to do
		case action == api.IdleActionStop:
			return s.mgr.Stop(ctx, b.sb, why)
		case action == api.IdleActionPause, action == api.IdleActionPauseToDisk:
			suspended, err = s.pauseSuspending(ctx, b.sb, action == api.IdleActionPauseToDisk, why)
			return err
		default:
			return fmt.Errorf("unknown %s action %q", lapseNames[why].what, action)
		}
	}
	var err error
	if idle {
		var ran bool
		if ran, err = b.sb.RunIfIdle(now, act); !ran {
			return // busy again since the check
		}
	} else {
		b.sb.ClearTTL()
		err = act()
	}
	s.followAgain(ctx, b.sb, suspended)
	e := auditEntry(start, b.sb.ID, "daemon", audit.ActionReap, map[string]any{"reason": why, "action": action})
	e.DurationMs = ms(time.Since(start))
	if err != nil {
		e.Error, e.ErrorMessage = api.ErrorFrom(err).Code, err.Error()
		s.log.Warn(lapseNames[why].what+" action", "sandbox", b.sb.ID, "action", action, "err", err)
		if idle {
			b.sb.Touch()
		}
	} else {
		s.log.Info(lapseNames[why].done, "sandbox", b.sb.ID, "action", action)
	}
	s.appendAudit(e)
	s.metrics.reaped.WithLabelValues(why).Inc()
}

// lapseNames are the words of lapse's logs, by its why: what lapsed and
// what a sandbox whose action was taken is.
var lapseNames = map[string]struct{ what, done string }{
	sandbox.ExpiredIdle: {"idle", "idle sandbox"},
	sandbox.ExpiredTTL:  {"ttl", "sandbox expired"},
}

// pauseView renders r's pause for the API (nil unless paused).
func pauseView(r sandbox.Record, lim api.Limits) *api.PauseInfo {
	p := r.Paused
	if r.State != sandbox.StatePaused || p == nil {
		return nil
	}
	v := &api.PauseInfo{ToDisk: p.ToDisk, PausedAt: p.At, File: p.File, Tag: p.Tag,
		SaveMs: p.SaveMs, VMStateBytes: p.VMStateBytes, DiskBytes: p.DiskBytes}
	if p.ToDisk && lim.PausedTTLSeconds > 0 {
		v.ExpiresAt = timePtr(p.At.Add(time.Duration(lim.PausedTTLSeconds) * time.Second))
	}
	return v
}
