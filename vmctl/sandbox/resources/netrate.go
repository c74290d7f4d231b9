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

// limitNet puts lim's network cap on the traffic to the guest, on the tap
// of spec's interface (network.LimitTap), once the domain runs — libvirt
// resets the tap's root qdisc when it starts the domain, so a cap set
// before would be gone; a restore's domain is still paused then, a boot's
// guest has not brought its NIC up yet — and returns how each direction
// is enforced: to the guest by an htb class, from the guest by the
// sandbox's firewall rules, which the network's setup made with the cap
// before the tap existed (ol: outLimit of the sandbox).
// What is not in force is "not enforced" with the reason (logged once),
// like the cgroup limits: it does not fail the start. No cap, no
// statuses.
func (e *Enforcer) limitNet(sb *sandbox.Sandbox, lim *sandbox.ResourceLimits, spec *domain.Spec, ol *network.OutLimit) []sandbox.LimitStatus {
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
	if tl, err := limitTap(tap, uint64(lim.NetBytesPerSec)); err != nil {
		e.log.Warn("network cap not enforced", "sandbox", sb.ID, "tap", tap, "err", err)
		in.Enforcement = sandbox.NotEnforced + ": " + err.Error()
	} else {
		in.Enforcement = sandbox.EnforcedTC
		in.Detail = fmt.Sprintf("htb class 1:1 on tap %s (its egress), burst %d bytes", tap, tl.Burst)
	}
	switch {
	case ol == nil || ol.BytesPerSec != uint64(lim.NetBytesPerSec):
		out.Enforcement = sandbox.NotEnforced + ": the sandbox's network was set up without this cap"
	case !ol.Enforced():
		if _, seen := warnedLimits.LoadOrStore(sandbox.LimitNetRateOut, true); !seen {
			e.log.Warn("resource limit not enforced on this host (warned once per limit; inspect shows it per sandbox)", "sandbox", sb.ID, "limit", sandbox.LimitNetRateOut, "err", ol.NotEnforced)
		}
		out.Enforcement = sandbox.NotEnforced + ": " + ol.NotEnforced
	default:
		out.Enforcement = sandbox.EnforcedNft
		out.Detail = ol.Detail(tap)
	}
	return []sandbox.LimitStatus{in, out}
}

// outLimit returns the cap on the traffic from sb's guest its network
// was set up with (nil: none).
func outLimit(sb *sandbox.Sandbox) *network.OutLimit {
	if n := sb.Record().Network; n != nil && n.Attachment != nil {
		return n.Attachment.OutLimit
	}
	return nil
}

// netMode names opts' network mode for messages ("none" when unset).
func netMode(opts sandbox.Options) netpolicy.Mode {
	if opts.Network.Mode == "" {
		return netpolicy.ModeNone
	}
	return opts.Network.Mode
}
