package sandbox_test

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// TestOutLimitCreateRestoreFake: a create's network cap reaches the
// network's setup as the cap on the guest's traffic, and so does a
// restore's (its source's cap, on its own network); inspect's net_rate_out
// names the firewall's limit each got.
func TestOutLimitCreateRestoreFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	f.mgr.SetNetwork(&fakeNetwork{})
	src, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "src", BootTimeout: 10 * time.Second,
		Network: netpolicy.Policy{Mode: netpolicy.ModeOpen}, Resources: sandbox.ResourceRequest{NetBytesPerSec: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.snaps.Save(t0, src, "a", nil); err != nil {
		t.Fatal(err)
	}
	fork, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: f.img, Name: "fork"})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range []*sandbox.Sandbox{src, fork} {
		r := sb.Record()
		want := network.OutLimit{BytesPerSec: 1 << 20, Burst: network.OutBurst(1 << 20), Table: "fake", Object: "out-" + sb.ID}
		if ol := r.Network.Attachment.OutLimit; ol == nil || *ol != want {
			t.Errorf("%s: the network's cap %+v, want %+v", sb.Name, ol, want)
		}
		var out *sandbox.LimitStatus
		for i, s := range r.Resources.Status {
			if s.Name == sandbox.LimitNetRateOut {
				out = &r.Resources.Status[i]
			}
		}
		if out == nil || out.Enforcement != sandbox.EnforcedNft || out.Value != 1<<20 || out.Detail != want.Detail(r.Network.Attachment.Tap) {
			t.Errorf("%s: net_rate_out %+v, want enforced by nftables with %s", sb.Name, out, want.Detail(r.Network.Attachment.Tap))
		}
	}
	for _, sb := range []*sandbox.Sandbox{fork, src} {
		if err := f.mgr.Remove(t0, sb, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.snaps.Delete(t0, "a"); err != nil {
		t.Fatal(err)
	}
}
