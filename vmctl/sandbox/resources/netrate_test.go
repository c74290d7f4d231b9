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
	limitTap = func(tap string, rate uint64) (network.TapLimit, error) {
		gotTap, gotRate = tap, rate
		return network.TapLimit{Burst: 209715}, nil
	}
	t.Cleanup(func() { limitTap = network.LimitTap })
	ol := &network.OutLimit{BytesPerSec: 2 << 20, Burst: 209715, Table: "agentbox", Object: "out-0123456789ab"}
	e, sb := New(nil, nil), &sandbox.Sandbox{ID: "0123456789ab"}
	lim := &sandbox.ResourceLimits{NetBytesPerSec: 2 << 20}
	spec := &domain.Spec{Interface: &domain.Interface{Tap: "abx1"}}
	st := e.limitNet(sb, lim, spec, ol)
	if len(st) != 2 || gotTap != "abx1" || gotRate != 2<<20 {
		t.Fatalf("limitNet = %+v (tap %q rate %d)", st, gotTap, gotRate)
	}
	if in := st[0]; in.Name != sandbox.LimitNetRate || in.Enforcement != sandbox.EnforcedTC || in.Value != 2<<20 ||
		in.Detail != "htb class 1:1 on tap abx1 (its egress), burst 209715 bytes" {
		t.Errorf("to the guest: %+v", in)
	}
	if out := st[1]; out.Name != sandbox.LimitNetRateOut || out.Enforcement != sandbox.EnforcedNft || out.Value != 2<<20 ||
		out.Detail != `nftables limit "out-0123456789ab" of table inet agentbox (rate over 2097152 bytes/second burst 209715 bytes, shared by the input and forward chains of tap abx1): excess dropped` {
		t.Errorf("from the guest: %+v", out)
	}
	refused := *ol
	refused.NotEnforced = "the kernel refused an nftables limit object (nft_limit): no such file"
	if out := e.limitNet(sb, lim, spec, &refused)[1]; out.Enforced() || out.Enforcement != "not enforced: "+refused.NotEnforced {
		t.Errorf("from the guest, refused by the kernel: %+v", out)
	}
	for _, other := range []*network.OutLimit{nil, {BytesPerSec: 1 << 20}} {
		if out := e.limitNet(sb, lim, spec, other)[1]; out.Enforced() || !strings.Contains(out.Enforcement, "set up without this cap") {
			t.Errorf("from the guest, network set up with %+v: %+v", other, out)
		}
	}
	if st := e.limitNet(sb, &sandbox.ResourceLimits{}, spec, ol); st != nil {
		t.Errorf("no cap: %+v", st)
	}
	if st := e.limitNet(sb, lim, &domain.Spec{}, ol); len(st) != 2 || st[0].Enforced() || st[1].Enforced() {
		t.Errorf("no interface: %+v, want not enforced", st)
	}
	limitTap = func(string, uint64) (network.TapLimit, error) { return network.TapLimit{}, errors.New("no htb") }
	if st := e.limitNet(sb, lim, spec, ol); len(st) != 2 || st[0].Enforced() || !strings.Contains(st[0].Enforcement, "no htb") || st[1].Enforcement != sandbox.EnforcedNft {
		t.Errorf("htb refused: %+v, want to the guest not enforced with the reason, from the guest still by nftables", st)
	}
}

// TestCheckRequestNetRateUnits: a cap below the minimum is refused in the
// units --net-rate takes (10K, 64K), with the bytes per second the API
// takes.
func TestCheckRequestNetRateUnits(t *testing.T) {
	err := CheckRequest(1, 0, sandbox.ResourceRequest{NetBytesPerSec: 10 << 10})
	want := "network cap 10K (10240 bytes/s) is below the minimum of 64K (65536 bytes/s): ask for at least 64K, or 0 for none"
	if err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("10K: %v, want it to end %q", err, want)
	}
	if got := rateText(3 << 20); got != "3M" {
		t.Errorf("rateText(3 MiB) = %q", got)
	}
	if got := rateText(1000); got != "1000" {
		t.Errorf("rateText(1000) = %q", got)
	}
}
