package sandbox_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// TestRestoredEnforcementFake: a sandbox restored from a snapshot, a warm
// create and a pooled warm sandbox record the same limits and the same
// enforcement as the created sandbox they come from (the XML's limits
// included, not only the cgroup ones the resources enforcer adds after the start).
func TestRestoredEnforcementFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	res := sandbox.ResourceRequest{CPUQuotaPercent: 50, IOBytesPerSec: 8 << 20, IOPS: 100, IOWeight: 300}
	src, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "src", BootTimeout: 10 * time.Second, Resources: res})
	if err != nil {
		t.Fatal(err)
	}
	want := src.Record().Resources
	names := map[string]string{}
	for _, s := range want.Status {
		names[s.Name] = s.Enforcement
	}
	// The fake driver takes the XML; it reports no QEMU pid, so pids is
	// not enforced.
	for _, n := range []string{sandbox.LimitDisk, sandbox.LimitCPUQuota, sandbox.LimitMemoryHard, sandbox.LimitIOBps, sandbox.LimitIOPS, sandbox.LimitIOWeight, sandbox.LimitTCGCacheMiB} {
		if e := names[n]; e != sandbox.EnforcedLibvirt && e != sandbox.EnforcedQEMU {
			t.Errorf("created: %s enforcement %q", n, e)
		}
	}
	if _, err := f.snaps.Save(t0, src, "s", nil); err != nil {
		t.Fatal(err)
	}
	check := func(what string, sb *sandbox.Sandbox) {
		t.Helper()
		got := sb.Record().Resources
		if got == nil || !reflect.DeepEqual(got.Status, want.Status) || got.CPUQuotaPercent != 50 || got.IOBytesPerSec != 8<<20 || got.IOPS != 100 {
			t.Errorf("%s: resources %+v, want the source's %+v", what, got, want)
		}
	}
	fork, err := f.snaps.Restore(t0, "s", snapshot.RestoreOptions{Image: f.img, Name: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	check("restored", fork)

	f.ws.SetPool(1)
	opts := sandbox.Options{Image: f.img, Accel: tcg, BootTimeout: 10 * time.Second, Resources: res}
	warm, err := f.ws.Create(t0, opts)
	if err != nil {
		t.Fatal(err)
	}
	check("warm", warm)
	// The pool fills in the background (src, fork, warm + 1 member).
	deadline := time.Now().Add(30 * time.Second)
	for doms, _ := fd.ListDomains(t0); len(doms) < 4; doms, _ = fd.ListDomains(t0) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill: domains %v", doms)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pooled, err := f.ws.Create(t0, opts)
	if err != nil {
		t.Fatal(err)
	}
	check("pooled", pooled)
	// A too small request is refused for a warm create too.
	if _, err := f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, MemoryMiB: 100}); err == nil {
		t.Error("warm create of 100 MiB accepted")
	}
	for _, sb := range []*sandbox.Sandbox{src, fork, warm, pooled} {
		if err := f.mgr.Destroy(t0, sb); err != nil {
			t.Error(err)
		}
	}
	if err := f.ws.Drain(t0); err != nil {
		t.Fatal(err)
	}
	if err := f.snaps.Delete(t0, "s"); err != nil {
		t.Error(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}
