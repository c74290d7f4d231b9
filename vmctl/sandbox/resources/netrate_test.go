package resources

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/domain"
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

func TestNetRateStatus(t *testing.T) {
	lim := &sandbox.ResourceLimits{NetBytesPerSec: 2 << 20}
	spec := &domain.Spec{Interface: &domain.Interface{Tap: "abx1"}, Tune: domain.Tune{NetBytesPerSec: 2 << 20}}
	st := netRateStatus(lim, spec)
	if st.Name != sandbox.LimitNetRate || st.Value != 2<<20 || st.Unit != "bytes/s" || st.Enforcement != sandbox.EnforcedLibvirt ||
		st.Detail != "<interface><bandwidth> inbound and outbound, burst 209715 bytes: tc on tap abx1 (htb to the guest, ingress policing from it)" {
		t.Errorf("status %+v", st)
	}
	if st := netRateStatus(lim, &domain.Spec{}); st.Enforced() {
		t.Errorf("without an interface: %+v, want not enforced", st)
	}
}
