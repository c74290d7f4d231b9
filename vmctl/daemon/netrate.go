package daemon

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// applyNetCeiling checks a create's network cap against the daemon's
// ceiling (--max-net-rate): above it, 422 with the numbers; a sandbox
// with a network that asks for no cap gets the ceiling, so every
// networked sandbox of such a daemon is capped. A sandbox without a
// network gets none (nothing to cap; asking for one is refused by the
// manager with what to do).
func (a *admission) applyNetCeiling(req *api.CreateSandboxRequest, policy netpolicy.Policy) error {
	c := a.ceilings.NetBps
	switch {
	case c <= 0:
		return nil
	case req.NetBps > c:
		return ceilingError("net rate", req.NetBps, c, " bytes/s", "--max-net-rate")
	case req.NetBps == 0 && policy.HasNIC():
		req.NetBps = c
	}
	return nil
}
