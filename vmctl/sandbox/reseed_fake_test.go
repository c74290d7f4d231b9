package sandbox_test

import (
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// TestRefreshReseedsFake: every guest that continues from a paused or
// saved state is reseeded exactly once (RefreshGuest): a resume in
// memory, a resume from disk, a restore; a create and a start of a
// stopped sandbox (cold boots) are not.
func TestRefreshReseedsFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "seeded")
	want := func(what string, n int) {
		t.Helper()
		if got := fd.reseeds(sb.Domain); got != n {
			t.Errorf("after %s: %d reseeds, want %d", what, got, n)
		}
	}
	want("create", 0)
	if err := f.mgr.Pause(t0, sb, false, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Resume(t0, sb, sandbox.ResumeOptions{}); err != nil {
		t.Fatal(err)
	}
	want("resume in memory", 1)
	if err := f.mgr.Pause(t0, sb, true, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Resume(t0, sb, sandbox.ResumeOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	want("resume from disk", 2)
	if _, err := f.snaps.Save(t0, sb, "s", nil); err != nil {
		t.Fatal(err)
	}
	fork, err := f.snaps.Restore(t0, "s", snapshot.RestoreOptions{Image: f.img, Name: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	if got := fd.reseeds(fork.Domain); got != 1 {
		t.Errorf("restore: %d reseeds, want 1", got)
	}
	if err := f.mgr.Stop(t0, sb, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Start(t0, sb, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	want("start", 2)
	for _, s := range []*sandbox.Sandbox{sb, fork} {
		if err := f.mgr.Destroy(t0, s); err != nil {
			t.Error(err)
		}
	}
	if err := f.snaps.Delete(t0, "s"); err != nil {
		t.Error(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}
