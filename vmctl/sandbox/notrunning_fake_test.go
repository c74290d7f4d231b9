package sandbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// lateStopDriver is the fake driver whose destroys send no stop event,
// as when libvirt's event arrives after the manager stopped watching.
type lateStopDriver struct{ *fakeDriver }

func (d lateStopDriver) DestroyDomain(ctx context.Context, name string) error {
	d.mu.Lock()
	delete(d.watches, name) // the event never comes
	d.mu.Unlock()
	return d.fakeDriver.DestroyDomain(ctx, name)
}

// TestNotRunningOnPurposeFake: a guest call on a sandbox agentbox paused
// (in memory or to disk, where its domain is gone on purpose) or stopped
// is a 409 sandbox_not_running that names the state once, never a 503
// guest_died; a detached process's output followed across a stop ends
// with that 409 too, not with an unmapped (500) lost connection.
func TestNotRunningOnPurposeFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, lateStopDriver{fd}, fd)
	sb := f.create(t, "purpose")
	defer f.mgr.Destroy(t0, sb)
	check := func(what string, err error, state string) {
		t.Helper()
		ae := api.ErrorFrom(err)
		if ae.Status != 409 || ae.Code != api.CodeNotRunning || errors.Is(err, sandbox.ErrGuestDied) {
			t.Errorf("%s: %d %s (%v); want 409 %s, not guest_died", what, ae.Status, ae.Code, err, api.CodeNotRunning)
		}
		if n := strings.Count(err.Error(), "sandbox not running"); n != 1 || !strings.Contains(err.Error(), "is "+state) {
			t.Errorf("%s: %q; want \"sandbox not running\" once and the state %s", what, err, state)
		}
	}
	for _, toDisk := range []bool{false, true} {
		if err := f.mgr.Pause(t0, sb, toDisk, "test"); err != nil {
			t.Fatal(err)
		}
		_, err := sb.ListProcesses(t0)
		check("list processes paused (to disk "+map[bool]string{false: "no", true: "yes"}[toDisk]+")", err, "paused")
		if err := f.mgr.Resume(t0, sb, sandbox.ResumeOptions{Image: f.img}); err != nil {
			t.Fatal(err)
		}
	}

	// A follower of a detached process when the sandbox is stopped.
	if _, err := sb.SpawnProcess(t0, "p1", agentproto.ExecRequest{Argv: []string{"sh", "-c", "while :; do echo x; sleep 0.1; done"}}, nil, false); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	first := make(chan struct{})
	go func() {
		var once bool
		_, err := sb.ProcessOutput(t0, "p1", 0, true, func(agentproto.ProcChunk) error {
			if !once {
				once = true
				close(first)
			}
			return nil
		})
		got <- err
	}()
	<-first
	if err := f.mgr.Stop(t0, sb, "stopped by test"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("the follow ended without an error after the stop")
		}
		ae := api.ErrorFrom(err)
		if ae.Code != api.CodeNotRunning || !strings.Contains(err.Error(), "stopped by test") {
			t.Errorf("follow cut by a stop: %d %s %q; want 409 %s saying why", ae.Status, ae.Code, err, api.CodeNotRunning)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the follow did not end after the stop")
	}
	_, err := sb.ListProcesses(t0)
	check("list processes stopped", err, "stopped")
}

// TestStateConflictMessageFake: a refused pause says "sandbox state
// conflict" once.
func TestStateConflictMessageFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "twice")
	defer f.mgr.Destroy(t0, sb)
	if err := f.mgr.Pause(t0, sb, false, "test"); err != nil {
		t.Fatal(err)
	}
	err := f.mgr.Pause(t0, sb, false, "test")
	if !errors.Is(err, sandbox.ErrConflict) || strings.Count(err.Error(), "sandbox state conflict") != 1 || !strings.Contains(err.Error(), "resume it first") {
		t.Errorf("pause of a paused sandbox: %q; want the conflict named once, with the hint", err)
	}
}

// TestSnapshotPausedHintFake: a snapshot of a paused sandbox is refused
// saying it is paused and how to resume it, not to restore an older
// snapshot.
func TestSnapshotPausedHintFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "napping")
	defer f.mgr.Destroy(t0, sb)
	for _, toDisk := range []bool{false, true} {
		if err := f.mgr.Pause(t0, sb, toDisk, "test"); err != nil {
			t.Fatal(err)
		}
		_, err := f.snaps.Save(t0, sb, "s", nil)
		if !errors.Is(err, sandbox.ErrNotRunning) || !strings.Contains(err.Error(), "is paused") || !strings.Contains(err.Error(), "agentbox resume napping") || strings.Contains(err.Error(), "restore an older") {
			t.Errorf("snapshot of a paused sandbox (to disk %v): %v; want the resume hint", toDisk, err)
		}
		if err := f.mgr.Resume(t0, sb, sandbox.ResumeOptions{Image: f.img}); err != nil {
			t.Fatal(err)
		}
	}
}
