package daemon

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// resourceRequest is the sandbox manager's view of a create's resources.
func resourceRequest(req api.CreateSandboxRequest) sandbox.ResourceRequest {
	return sandbox.ResourceRequest{
		DiskMiB: req.DiskMiB, CPUQuotaPercent: req.CPUQuotaPercent,
		IOBytesPerSec: req.IOBps, IOPS: req.IOPS, IOWeight: req.IOWeight, Pids: req.Pids,
		NetBytesPerSec: req.NetBps,
	}
}

// resourceArgs adds a new sandbox's resolved limits and their
// enforcement to its create audit entry.
func resourceArgs(args map[string]any, r sandbox.Record) {
	lim := r.Resources
	if lim == nil {
		return
	}
	args["disk_mib"], args["memory_hard_limit_mib"], args["pids"] = lim.DiskMiB, lim.MemoryHardLimitMiB, lim.Pids
	for k, v := range map[string]int64{"cpu_quota_percent": int64(lim.CPUQuotaPercent), "io_bps": lim.IOBytesPerSec, "iops": lim.IOPS, "io_weight": int64(lim.IOWeight), "net_bps": lim.NetBytesPerSec} {
		if v > 0 {
			args[k] = v
		}
	}
	enf := map[string]string{}
	for _, s := range lim.Status {
		enf[s.Name] = s.Enforcement
	}
	args["enforcement"] = enf
}

// viewResources adds the sandbox's limits, their enforcement and its
// latest usage sample (latest: the usage monitor's) to its API view.
func viewResources(r sandbox.Record, v *api.Sandbox, latest func(id string) (resources.Usage, bool)) {
	if lim := r.Resources; lim != nil {
		res := &api.Resources{
			DiskMiB: lim.DiskMiB, CPUQuotaPercent: lim.CPUQuotaPercent, MemoryHardLimitMiB: lim.MemoryHardLimitMiB,
			IOBps: lim.IOBytesPerSec, IOPS: lim.IOPS, IOWeight: lim.IOWeight, Pids: lim.Pids, NetBps: lim.NetBytesPerSec,
			Enforcement: []api.LimitEnforcement{},
		}
		for _, s := range lim.Status {
			res.Enforcement = append(res.Enforcement, api.LimitEnforcement{Limit: s.Name, Value: s.Value, Unit: s.Unit, Enforcement: s.Enforcement, Detail: s.Detail})
		}
		v.Resources = res
	}
	if r.State != sandbox.StateRunning {
		return
	}
	if u, ok := latest(r.ID); ok {
		v.Usage = &api.Usage{
			SampledAt: u.SampledAt, DomainState: u.DomainState, PauseReason: u.PauseReason,
			CPUTimeNs: u.CPUTimeNs, MemoryRSSBytes: u.MemoryRSSBytes, MemoryLimitBytes: u.MemoryLimitBytes,
			DiskBytes: u.DiskBytes, DiskCapBytes: u.DiskCapBytes, NetRxBytes: u.NetRxBytes, NetTxBytes: u.NetTxBytes,
			Pids: u.Pids, PidsMax: u.PidsMax,
		}
		if m := u.Memory; m != nil {
			v.Usage.Memory = &api.MemoryUsage{
				PSSBytes: m.PSSBytes, PrivateBytes: m.PrivateBytes, SharedBytes: m.SharedBytes, AnonBytes: m.AnonBytes,
				CgroupBytes: m.CgroupBytes, CgroupAnonBytes: m.CgroupAnonBytes, CgroupFileBytes: m.CgroupFileBytes,
			}
		}
	}
}
