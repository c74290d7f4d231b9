package resources

import (
	"fmt"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// netRateStatus is how lim's network cap is enforced on the domain of
// spec: libvirt's <bandwidth> on the interface, which libvirt applies
// with tc on the host's tap when the domain starts (also for a tap it did
// not make: type='ethernet', managed='no'). Seen from the host the tap's
// egress is the guest's inbound traffic (an htb class shapes it, queued)
// and its ingress the guest's outbound traffic (an ingress policer drops
// what exceeds the rate).
func netRateStatus(lim *sandbox.ResourceLimits, spec *domain.Spec) sandbox.LimitStatus {
	st := sandbox.LimitStatus{Name: sandbox.LimitNetRate, Value: lim.NetBytesPerSec, Unit: "bytes/s"}
	if spec.Interface == nil {
		st.Enforcement = sandbox.NotEnforced + ": the sandbox has no network interface"
		return st
	}
	st.Enforcement = sandbox.EnforcedLibvirt
	st.Detail = fmt.Sprintf("<interface><bandwidth> inbound and outbound, burst %d bytes: tc on tap %s (htb to the guest, ingress policing from it)", spec.Tune.NetBurst(), spec.Interface.Tap)
	return st
}

// netMode names opts' network mode for messages ("none" when unset).
func netMode(opts sandbox.Options) netpolicy.Mode {
	if opts.Network.Mode == "" {
		return netpolicy.ModeNone
	}
	return opts.Network.Mode
}
