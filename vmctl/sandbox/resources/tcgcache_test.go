package resources

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestCheckTCGCacheMiB(t *testing.T) {
	for _, ok := range []int{0, MinTCGCacheMiB, 64, DefaultTCGCacheMiB, MaxTCGCacheMiB} {
		if err := CheckTCGCacheMiB(ok); err != nil {
			t.Errorf("CheckTCGCacheMiB(%d): %v", ok, err)
		}
	}
	for _, bad := range []int{-1, 1, MinTCGCacheMiB - 1, MaxTCGCacheMiB + 1} {
		err := CheckTCGCacheMiB(bad)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "want 32..2048 MiB, or 0 for the default") {
			t.Errorf("CheckTCGCacheMiB(%d) = %v, want ErrInvalid with the bounds", bad, err)
		}
	}
}

func TestWithTCGCacheMiB(t *testing.T) {
	for _, tc := range []struct{ set, want int64 }{{0, DefaultTCGCacheMiB}, {64, 64}, {1, MinTCGCacheMiB}, {1 << 20, MaxTCGCacheMiB}} {
		if got := New(nil, nil, WithTCGCacheMiB(int(tc.set))).tcgCacheMiB; got != tc.want {
			t.Errorf("WithTCGCacheMiB(%d): %d, want %d", tc.set, got, tc.want)
		}
	}
}

func TestHardLimitCountsTheTCGCache(t *testing.T) {
	// 8/5 × (512 + 160 + cache), rounded up; KVM has no cache.
	for _, tc := range []struct{ cache, want int64 }{{0, 1076}, {64, 1178}, {256, 1485}, {1024, 2714}} {
		if got := HardLimitMiB(512, tc.cache); got != tc.want {
			t.Errorf("HardLimitMiB(512, %d) = %d, want %d", tc.cache, got, tc.want)
		}
	}
	if MemoryHardLimitMiB(512, true) != HardLimitMiB(512, DefaultTCGCacheMiB) || MemoryHardLimitMiB(512, false) != HardLimitMiB(512, 0) {
		t.Error("MemoryHardLimitMiB is not HardLimitMiB with the default cache")
	}
}

// The record's cache size reaches the domain XML of a TCG domain, and a
// KVM domain gets no <tcg> element at all.
func TestTuneTCGCacheOnlyForTCG(t *testing.T) {
	lim := &sandbox.ResourceLimits{DiskMiB: 2048, MemoryHardLimitMiB: 1178, TCGCacheMiB: 64}
	if got := tune(lim, domain.TypeQEMU, true).TCGCacheMiB; got != 64 {
		t.Errorf("TCG tune: cache %d, want the record's 64", got)
	}
	old := &sandbox.ResourceLimits{DiskMiB: 2048, MemoryHardLimitMiB: 1485} // a record from before the setting
	if got := tune(old, domain.TypeQEMU, true).TCGCacheMiB; got != DefaultTCGCacheMiB {
		t.Errorf("TCG tune of an old record: cache %d, want %d", got, DefaultTCGCacheMiB)
	}
	if got := tune(lim, domain.TypeKVM, true).TCGCacheMiB; got != 0 {
		t.Errorf("KVM tune: cache %d, want none", got)
	}

	spec := func(typ domain.Type, accel string) domain.Spec {
		return domain.Spec{Name: "agentbox-x", SandboxID: "x", Type: typ, MemoryMiB: 512, VCPUs: 1, Kernel: "/k", Disk: "/d.qcow2",
			AgentSocket: "/run/x.sock", AgentPort: "org.agentbox.agent.0", ConsoleLog: "/run/x.log", Tune: tune(lim, typ, true)}
	}
	for _, tc := range []struct {
		typ  domain.Type
		want bool
	}{{domain.TypeQEMU, true}, {domain.TypeKVM, false}} {
		xml, err := domain.XML(spec(tc.typ, ""))
		if err != nil {
			t.Fatalf("%s: %v", tc.typ, err)
		}
		const el = `<tb-cache unit="MiB">64</tb-cache>`
		if has := strings.Contains(xml, el); has != tc.want {
			t.Errorf("%s domain: has %s = %v, want %v\n%s", tc.typ, el, has, tc.want, xml)
		}
		if !tc.want && strings.Contains(xml, "<tcg") {
			t.Errorf("KVM domain has a <tcg> element:\n%s", xml)
		}
	}
}
