package resources

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestCheckRequestNetRate(t *testing.T) {
	for _, v := range []int64{-1, 1, MinNetBytesPerSec - 1} {
		err := CheckRequest(1, 0, sandbox.ResourceRequest{NetBytesPerSec: v})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "network cap") {
			t.Errorf("net rate %d: %v, want ErrInvalid naming the network cap", v, err)
		}
	}
	if err := CheckRequest(1, 0, sandbox.ResourceRequest{NetBytesPerSec: MinNetBytesPerSec}); err != nil {
		t.Errorf("the minimum: %v", err)
	}
}

func TestLimitNet(t *testing.T) {
	var gotTap string
	var gotRate uint64
	outbound := errors.New("no police action")
	limitTap = func(tap string, rate uint64) (network.TapLimit, error) {
		gotTap, gotRate = tap, rate
		return network.TapLimit{Burst: 209715, Outbound: outbound}, nil
	}
	t.Cleanup(func() { limitTap = network.LimitTap })
	e, sb := New(nil, nil), &sandbox.Sandbox{ID: "0123456789ab"}
	lim := &sandbox.ResourceLimits{NetBytesPerSec: 2 << 20}
	spec := &domain.Spec{Interface: &domain.Interface{Tap: "abx1"}}
	st := e.limitNet(sb, lim, spec)
	if len(st) != 2 || gotTap != "abx1" || gotRate != 2<<20 {
		t.Fatalf("limitNet = %+v (tap %q rate %d)", st, gotTap, gotRate)
	}
	if in := st[0]; in.Name != sandbox.LimitNetRate || in.Enforcement != sandbox.EnforcedTC || in.Value != 2<<20 ||
		in.Detail != "htb class 1:1 on tap abx1 (its egress), burst 209715 bytes" {
		t.Errorf("to the guest: %+v", in)
	}
	if out := st[1]; out.Name != sandbox.LimitNetRateOut || out.Enforced() || out.Enforcement != "not enforced: no police action" {
		t.Errorf("from the guest without a policer: %+v", out)
	}
	outbound = nil
	st = e.limitNet(sb, lim, spec)
	if out := st[1]; out.Enforcement != sandbox.EnforcedTC || !strings.Contains(out.Detail, "police") {
		t.Errorf("from the guest with a policer: %+v", out)
	}
	if st := e.limitNet(sb, &sandbox.ResourceLimits{}, spec); st != nil {
		t.Errorf("no cap: %+v", st)
	}
	if st := e.limitNet(sb, lim, &domain.Spec{}); len(st) != 2 || st[0].Enforced() {
		t.Errorf("no interface: %+v, want not enforced", st)
	}
	limitTap = func(string, uint64) (network.TapLimit, error) { return network.TapLimit{}, errors.New("no htb") }
	if st := e.limitNet(sb, lim, spec); len(st) != 2 || st[0].Enforced() || st[1].Enforced() || !strings.Contains(st[0].Enforcement, "no htb") {
		t.Errorf("a cap that cannot be set: %+v, want both not enforced with the reason", st)
	}
}
