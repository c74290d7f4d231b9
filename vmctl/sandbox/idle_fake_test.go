package sandbox_test

import (
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// TestIdleActionExcludesExecsFake: the idle action and the idleness it
// acts on are one step for commands. A command begun before the action
// keeps the sandbox from being idle (the action does not run); one that
// begins while the action (here a pause) runs waits for it and is refused
// as not running, uncounted, instead of running into the pause; a call
// that resumes a paused sandbox first (?resume=true: KeepAwake, then
// Resume) waits for the action too, and its command then runs.
func TestIdleActionExcludesExecsFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	acct := sandbox.ExecAccount{Limits: sandbox.ExecLimits{IdleTimeoutSeconds: 1, IdleAction: "pause"}}
	sb, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "idle", BootTimeout: 10 * time.Second, Extra: acct.Encode()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.mgr.Destroy(t0, sb)
	later := time.Now().Add(time.Hour)
	req := agentproto.ExecRequest{Argv: []string{"true"}}
	count := func(a *sandbox.ExecAccount) error { a.ExecCount++; return nil } // the daemon's execCount, in short

	// Begun before: not idle.
	if err := sb.BeginExec(count); err != nil {
		t.Fatal(err)
	}
	if sb.Expired(later) != "" {
		t.Fatalf("a sandbox with a command in flight expires: %q", sb.Expired(later))
	}
	ran, err := sb.RunIfIdle(later, func() error { t.Error("idle action ran with a command in flight"); return nil })
	if ran || err != nil {
		t.Fatalf("RunIfIdle with a command in flight = %v, %v; want false, nil", ran, err)
	}
	sb.EndExec()
	if got := sb.Expired(later); got != sandbox.ExpiredIdle {
		t.Fatalf("Expired after the command = %q, want %q", got, sandbox.ExpiredIdle)
	}

	// Begun during the action: waits for it, refused.
	execs := sb.ExecAccount().ExecCount
	began := make(chan error, 1)
	awake := make(chan struct{})
	ran, err = sb.RunIfIdle(later, func() error {
		go func() {
			began <- sb.BeginExec(count)
		}()
		go func() {
			sb.KeepAwake()
			close(awake)
		}()
		if err := f.mgr.Pause(t0, sb, false, sandbox.ExpiredIdle); err != nil {
			return err
		}
		select {
		case err := <-began:
			t.Errorf("a command began while the idle action paused the sandbox (err %v); it must wait for the action", err)
		case <-awake:
			t.Error("KeepAwake returned while the idle action ran; it must wait for it")
		case <-time.After(200 * time.Millisecond): // they wait, as they must
		}
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("RunIfIdle of an idle sandbox = %v, %v; want true, nil", ran, err)
	}
	if err := <-began; !errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("command begun during the idle pause: %v, want ErrNotRunning", err)
	}
	if got := sb.ExecAccount().ExecCount; got != execs {
		t.Errorf("exec count %d after a refused command, want %d", got, execs)
	}
	<-awake
	if st := sb.State(); st != sandbox.StatePaused {
		t.Fatalf("sandbox is %s after the idle pause, want paused", st)
	}
	if got := sb.Expired(later); got != "" {
		t.Errorf("a paused sandbox expires: %q", got)
	}

	// ?resume=true: resumed, then the command runs.
	if err := f.mgr.Resume(t0, sb, sandbox.ResumeOptions{Timeout: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := sb.BeginExec(count); err != nil {
		t.Fatal(err)
	}
	st, err := sb.Exec(t0, req, nil, nil, nil)
	sb.EndExec()
	if err != nil || st.Code != 0 {
		t.Fatalf("command after the resume: %+v, %v", st, err)
	}
}
