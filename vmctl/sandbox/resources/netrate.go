package resources

import (
	"fmt"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// limitTap is network.LimitTap; tests replace it.
var limitTap = network.LimitTap

// limitNet puts lim's network cap on the tap of spec's interface
// (network.LimitTap) once the domain runs — libvirt resets the tap's root
// qdisc when it starts the domain, so a cap set before would be gone; a
// restore's domain is still paused then, a boot's guest has not brought
// its NIC up yet — and returns how each direction is enforced: to the
// guest by an htb class, from the guest by an ingress policer where the
// kernel has one. What cannot be set is "not enforced" with the reason
// (logged once), like the cgroup limits: it does not fail the start. No
// cap, no statuses.
func (e *Enforcer) limitNet(sb *sandbox.Sandbox, lim *sandbox.ResourceLimits, spec *domain.Spec) []sandbox.LimitStatus {
	if lim.NetBytesPerSec <= 0 {
		return nil
	}
	in := sandbox.LimitStatus{Name: sandbox.LimitNetRate, Value: lim.NetBytesPerSec, Unit: "bytes/s"}
	out := sandbox.LimitStatus{Name: sandbox.LimitNetRateOut, Value: lim.NetBytesPerSec, Unit: "bytes/s"}
	if spec.Interface == nil {
		in.Enforcement = sandbox.NotEnforced + ": the sandbox has no network interface"
		out.Enforcement = in.Enforcement
		return []sandbox.LimitStatus{in, out}
	}
	tap := spec.Interface.Tap
	tl, err := limitTap(tap, uint64(lim.NetBytesPerSec))
	if err != nil {
		e.log.Warn("network cap not enforced", "sandbox", sb.ID, "tap", tap, "err", err)
		in.Enforcement = sandbox.NotEnforced + ": " + err.Error()
		out.Enforcement = in.Enforcement
		return []sandbox.LimitStatus{in, out}
	}
	in.Enforcement = sandbox.EnforcedTC
	in.Detail = fmt.Sprintf("htb class 1:1 on tap %s (its egress), burst %d bytes", tap, tl.Burst)
	if tl.Outbound != nil {
		if _, seen := warnedLimits.LoadOrStore(sandbox.LimitNetRateOut, true); !seen {
			e.log.Warn("resource limit not enforced on this host (warned once per limit; inspect shows it per sandbox)", "sandbox", sb.ID, "limit", sandbox.LimitNetRateOut, "err", tl.Outbound)
		}
		out.Enforcement = sandbox.NotEnforced + ": " + tl.Outbound.Error()
	} else {
		out.Enforcement = sandbox.EnforcedTC
		out.Detail = fmt.Sprintf("ingress police action on tap %s, burst %d bytes, excess dropped", tap, tl.Burst)
	}
	return []sandbox.LimitStatus{in, out}
}

// netMode names opts' network mode for messages ("none" when unset).
func netMode(opts sandbox.Options) netpolicy.Mode {
	if opts.Network.Mode == "" {
		return netpolicy.ModeNone
	}
	return opts.Network.Mode
}
