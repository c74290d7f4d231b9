package sandbox_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// pauseTags returns the tags of saved states of pauses to disk ("p…") in
// file.
func pauseTags(t *testing.T, file string) []string {
	t.Helper()
	list, err := overlay.Snapshots(t0, file)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, o := range list {
		if strings.HasPrefix(o.Tag, "p") {
			tags = append(tags, o.Tag)
		}
	}
	return tags
}

// TestReconcileInterruptedPauseFake: a daemon killed in the middle of a
// pause to disk (the vCPUs stopped and the state saved, the record still
// running) leaves a paused domain and a saved state nobody names. The
// restarted daemon's Reconcile lets the domain run again and adopts it
// (its agent answers), and deletes the stray state from the overlay; a
// stray state in a stopped sandbox's overlay goes with its next Start.
func TestReconcileInterruptedPauseFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "midpause")
	// What Pause did before the kill: vCPUs stopped, state saved.
	if err := fd.PauseDomain(t0, sb.Domain); err != nil {
		t.Fatal(err)
	}
	if err := fd.SaveSnapshot(t0, sb.Domain, "p0123456789ab"); err != nil {
		t.Fatal(err)
	}
	sb.Agent().Close() // the killed daemon's connection

	mgr, _, _, err := newManager(sandbox.Config{Driver: fd, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.Reconcile(t0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(rep.Adopted, sb.ID) || len(rep.Failed) != 0 {
		t.Fatalf("reconcile: adopted %v, failed %v; want %s adopted", rep.Adopted, rep.Failed, sb.ID)
	}
	again, err := mgr.Get(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.State() != sandbox.StateRunning || again.Agent() == nil {
		t.Fatalf("adopted sandbox is %s (agent %v), want running with its agent", again.State(), again.Agent())
	}
	if d, _ := fd.dom(sb.Domain); d == nil || d.paused {
		t.Fatal("the adopted domain stays paused")
	}
	if tags := pauseTags(t, sb.Overlay); len(tags) != 0 {
		t.Fatalf("saved states left in the overlay after reconcile: %v", tags)
	}

	// A stray state in the overlay of a stopped sandbox: Start drops it.
	if err := fd.SaveSnapshot(t0, sb.Domain, "p00000000000a"); err != nil {
		t.Fatal(err)
	}
	if err := mgr.Stop(t0, again, "test"); err != nil {
		t.Fatal(err)
	}
	if tags := pauseTags(t, sb.Overlay); len(tags) != 1 {
		t.Fatalf("saved states before start: %v, want the stray one", tags)
	}
	if err := mgr.Start(t0, again, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	if tags := pauseTags(t, sb.Overlay); len(tags) != 0 {
		t.Fatalf("saved states left in the overlay after start: %v", tags)
	}
	if err := mgr.Destroy(t0, again); err != nil {
		t.Fatal(err)
	}
}
