package sandbox_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// fakeClone restores a clone of a "memory template" from the snapshot
// snap: the path a warm memory create takes (vmctl/sandbox/warm), with
// the template's RAM file ram mapped copy-on-write. The fake driver loads
// the snapshot's tag; the record's SharedMemory is what is checked.
func (f *fakeFixture) fakeClone(t *testing.T, snap sandbox.SnapshotRecord, ram, name string) *sandbox.Sandbox {
	t.Helper()
	src := snapshot.Source{
		Name: snap.Name, File: snap.File, Tag: snap.Tag, Spec: snap.Spec,
		Accel:     accel.Choice{DomainType: snap.DomainType, Accel: accel.Mode(snap.Accel)},
		VCPUs:     snap.VCPUs,
		MemoryMiB: snap.MemoryMiB,
		Memory:    &domain.MemoryBackend{File: ram, Incoming: true},
	}
	sb, err := f.snaps.RestoreFrom(t0, src, snapshot.RestoreOptions{Image: f.img, Name: name})
	if err != nil {
		t.Fatalf("clone %s: %v", name, err)
	}
	return sb
}

// TestSharedMemoryEndsWithTheMappingFake: a clone of a memory template
// counts the template's RAM once (Record.SharedMemory); a clone whose
// domain comes back without the template mapping — started again after a
// stop, resumed from disk, or a restore of its snapshot, all of which get
// private RAM (domain.MemoryBackend.Private) — holds its whole guest RAM
// again, so admission (Resources) counts all of it and its record says
// so, also after a daemon restart. A live clone keeps its SharedMemory
// through a daemon restart (Reconcile).
func TestSharedMemoryEndsWithTheMappingFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	// The template's RAM file: 8 MiB allocated of the 128 MiB guest.
	ram := filepath.Join(t.TempDir(), "ram")
	if err := os.WriteFile(ram, make([]byte, 8<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	const mem, shared = 128, 8
	tpl := f.create(t, "tpl")
	defer f.mgr.Destroy(t0, tpl)
	snap, err := f.snaps.Save(t0, tpl, "tpl", nil)
	if err != nil {
		t.Fatal(err)
	}
	var clones []*sandbox.Sandbox
	for _, n := range []string{"c1", "c2", "c3"} {
		c := f.fakeClone(t, snap, ram, n)
		defer f.mgr.Destroy(t0, c)
		clones = append(clones, c)
	}
	c1, c2, c3 := clones[0], clones[1], clones[2]
	want := &sandbox.SharedMemory{Template: ram, MiB: shared}
	for _, c := range clones {
		if got := c.Record().SharedMemory; got == nil || *got != *want {
			t.Fatalf("clone %s: SharedMemory %+v, want %+v", c.Name, got, want)
		}
	}
	used := func(what string, want int) {
		t.Helper()
		if got := f.mgr.Resources().UsedMemoryMiB; got != want {
			t.Errorf("%s: %d MiB committed, want %d", what, got, want)
		}
	}
	// The booted template sandbox whole, three clones' private parts, the
	// template's RAM once.
	used("three clones", mem+3*(mem-shared)+shared)

	// Stop + start: a cold boot with private RAM.
	if err := f.mgr.Stop(t0, c1, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Start(t0, c1, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	if got := c1.Record().SharedMemory; got != nil {
		t.Errorf("clone started again: SharedMemory %+v, want none (its domain maps no template)", got)
	}
	used("c1 started again", 2*mem+2*(mem-shared)+shared)

	// Pause to disk + resume: the saved state loads into private RAM.
	if err := f.mgr.Pause(t0, c2, true, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Resume(t0, c2, sandbox.ResumeOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	if got := c2.Record().SharedMemory; got != nil {
		t.Errorf("clone resumed from disk: SharedMemory %+v, want none", got)
	}
	used("c2 resumed from disk", 3*mem+(mem-shared)+shared)

	// A restore of a clone's snapshot maps no template either.
	cs, err := f.snaps.Save(t0, c3, "c3snap", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := f.snaps.Restore(t0, cs.Name, snapshot.RestoreOptions{Image: f.img, Name: "fromclone"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.mgr.Destroy(t0, r)
	if got := r.Record().SharedMemory; got != nil {
		t.Errorf("restore of a clone's snapshot: SharedMemory %+v, want none", got)
	}
	used("restore of c3's snapshot", 4*mem+(mem-shared)+shared)

	// A daemon restart: the live clone c3 keeps its SharedMemory, the
	// restarted ones stay without.
	c3.Agent().Close()
	for _, c := range []*sandbox.Sandbox{c1, c2, r, tpl} {
		c.Agent().Close()
	}
	mgr, _, _, err := newManager(sandbox.Config{Driver: fd, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.Reconcile(t0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*sandbox.Sandbox{c1, c2, c3, r} {
		if !slices.Contains(rep.Adopted, c.ID) {
			t.Fatalf("reconcile did not adopt %s: adopted %v, failed %v", c.Name, rep.Adopted, rep.Failed)
		}
	}
	for _, c := range []*sandbox.Sandbox{c1, c2, r} {
		a, _ := mgr.Get(c.ID)
		if got := a.Record().SharedMemory; got != nil {
			t.Errorf("after a daemon restart %s: SharedMemory %+v, want none", c.Name, got)
		}
	}
	a3, _ := mgr.Get(c3.ID)
	if got := a3.Record().SharedMemory; got == nil || *got != *want {
		t.Errorf("after a daemon restart the live clone c3: SharedMemory %+v, want %+v", got, want)
	}
	if got := mgr.Resources().UsedMemoryMiB; got != 4*mem+(mem-shared)+shared {
		t.Errorf("after a daemon restart: %d MiB committed, want %d", got, 4*mem+(mem-shared)+shared)
	}
}
