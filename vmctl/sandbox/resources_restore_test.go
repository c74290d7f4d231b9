package sandbox_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/domain"
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

// memlockDriver is a fake driver on a host where libvirt cannot apply a
// memory hard limit: a domain whose XML has one does not start, with
// libvirt's error. starts counts StartDomain calls, hard those with a
// hard limit.
type memlockDriver struct {
	*fakeDriver
	starts, hard atomic.Int32
}

func (d *memlockDriver) StartDomain(ctx context.Context, spec domain.Spec) error {
	d.starts.Add(1)
	if spec.Tune.MemoryHardLimitMiB > 0 {
		d.hard.Add(1)
		return errors.New("internal error: cannot limit locked memory of process 4242 to 1128267776: Operation not permitted")
	}
	return d.fakeDriver.StartDomain(ctx, spec)
}

// TestMemlockFallbackPerEnforcer: the resources enforcer that saw libvirt
// fail to apply a memory hard limit starts its next domains without one
// (the cgroup gets it; the fake driver has no QEMU pid, so it is recorded
// as not enforced), and that lesson stays with its own driver: an enforcer
// of another driver, made afterwards in the same process, still gives the
// limit to libvirt. (It once was a process-wide flag, and which fake test
// saw libvirt's enforcement depended on which real libvirt test ran
// first.)
func TestMemlockFallbackPerEnforcer(t *testing.T) {
	md := &memlockDriver{fakeDriver: newFakeDriver(t)}
	a := newFakeFixture(t, md, md.fakeDriver)
	enforcement := func(sb *sandbox.Sandbox) string {
		for _, s := range sb.Record().Resources.Status {
			if s.Name == sandbox.LimitMemoryHard {
				return s.Enforcement
			}
		}
		return ""
	}
	first := a.create(t, "first")
	if md.starts.Load() != 2 || md.hard.Load() != 1 {
		t.Fatalf("first start: %d starts, %d with a hard limit; want the refused one and the retry", md.starts.Load(), md.hard.Load())
	}
	if e := enforcement(first); !strings.HasPrefix(e, sandbox.NotEnforced) {
		t.Errorf("first: memory hard limit enforcement %q, want %q (the fake has no cgroup)", e, sandbox.NotEnforced)
	}
	second := a.create(t, "second")
	if md.starts.Load() != 3 || md.hard.Load() != 1 {
		t.Errorf("second start: %d starts, %d with a hard limit; want one more, without", md.starts.Load(), md.hard.Load())
	}

	fd := newFakeDriver(t)
	b := newFakeFixture(t, fd, fd)
	other := b.create(t, "other")
	if e := enforcement(other); e != sandbox.EnforcedLibvirt {
		t.Errorf("another driver's sandbox: memory hard limit enforcement %q, want %q", e, sandbox.EnforcedLibvirt)
	}
	for _, sb := range []*sandbox.Sandbox{first, second} {
		if err := a.mgr.Destroy(t0, sb); err != nil {
			t.Error(err)
		}
	}
	if err := b.mgr.Destroy(t0, other); err != nil {
		t.Error(err)
	}
	testenv.AssertNoLeaks(t, a.state, a.runtime)
	testenv.AssertNoLeaks(t, b.state, b.runtime)
}
