package daemon

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// Ceilings are the most a create may ask for (`agentbox serve --max-*`,
// TOML keys max_*). Zero means no ceiling. A request above one is refused
// with 422 and the numbers, before anything is made. For the CPU quota,
// I/O caps and pids a request that leaves the value unset gets the
// ceiling (the CPU quota at most 100 % per vCPU), so the limit always
// holds.
type Ceilings struct {
	VCPUs           int   // --max-vcpus
	MemoryMiB       int   // --max-memory, MiB of guest RAM
	DiskMiB         int64 // --max-disk, MiB
	CPUQuotaPercent int   // --max-cpu-quota, percent of one host CPU
	IOBps           int64 // --max-io-bps, bytes/s
	IOPS            int64 // --max-iops, operations/s
	Pids            int64 // --max-pids, host tasks of the QEMU process
}

// ceilingError is the 422 of a request above a ceiling.
func ceilingError(what string, got, ceiling int64, unit, flag string) error {
	msg := fmt.Sprintf("%s %d%s is above the daemon's ceiling of %d%s (%s): ask for at most %d%s",
		what, got, unit, ceiling, unit, flag, ceiling, unit)
	return errdefs.WithDetails(errdefs.ErrFailedPrecondition.WithMessage(msg),
		map[string]any{"resource": what, "requested": got, "ceiling": ceiling, "flag": flag})
}

// applyCeilings checks a create against the daemon's ceilings after the
// image's defaults are applied, and fills unset capped values with their
// ceiling. Errors are 422 with the numbers.
func (d *Daemon) applyCeilings(ctx context.Context, img *image.Image, req *api.CreateSandboxRequest) error {
	c := d.cfg.Ceilings
	vcpus, mem, rr := resources.Resolve(img, req.VCPUs, req.MemoryMiB, resourceRequest(*req))
	switch {
	case c.VCPUs > 0 && vcpus > c.VCPUs:
		return ceilingError("vcpus", int64(vcpus), int64(c.VCPUs), "", "--max-vcpus")
	case c.MemoryMiB > 0 && mem > c.MemoryMiB:
		return ceilingError("memory", int64(mem), int64(c.MemoryMiB), " MiB", "--max-memory")
	case c.CPUQuotaPercent > 0 && rr.CPUQuotaPercent > c.CPUQuotaPercent:
		return ceilingError("cpu quota", int64(rr.CPUQuotaPercent), int64(c.CPUQuotaPercent), "%", "--max-cpu-quota")
	case c.IOBps > 0 && rr.IOBytesPerSec > c.IOBps:
		return ceilingError("io", rr.IOBytesPerSec, c.IOBps, " bytes/s", "--max-io-bps")
	case c.IOPS > 0 && rr.IOPS > c.IOPS:
		return ceilingError("iops", rr.IOPS, c.IOPS, " ops/s", "--max-iops")
	case c.Pids > 0 && req.Pids > c.Pids:
		return ceilingError("pids", req.Pids, c.Pids, "", "--max-pids")
	}
	if c.DiskMiB > 0 {
		disk := rr.DiskMiB
		if disk == 0 {
			info, err := overlay.Inspect(ctx, img.Disk)
			if err != nil {
				return image.ErrInvalid.WithMessage(fmt.Sprintf("image disk: %v", err))
			}
			disk = int64((info.VirtualSize + 1<<20 - 1) >> 20)
		}
		if disk > c.DiskMiB {
			return ceilingError("disk", disk, c.DiskMiB, " MiB", "--max-disk")
		}
	}
	if c.CPUQuotaPercent > 0 && rr.CPUQuotaPercent == 0 {
		req.CPUQuotaPercent = min(c.CPUQuotaPercent, 100*vcpus) // more has no effect (and is refused)
	}
	if c.IOBps > 0 && req.IOBps == 0 {
		req.IOBps = c.IOBps
	}
	if c.IOPS > 0 && req.IOPS == 0 {
		req.IOPS = c.IOPS
	}
	if c.Pids > 0 && req.Pids == 0 {
		req.Pids = min(c.Pids, resources.DefaultPids)
	}
	return nil
}

// resourceRequest is the sandbox manager's view of a create's resources.
func resourceRequest(req api.CreateSandboxRequest) sandbox.ResourceRequest {
	return sandbox.ResourceRequest{
		DiskMiB: req.DiskMiB, CPUQuotaPercent: req.CPUQuotaPercent,
		IOBytesPerSec: req.IOBps, IOPS: req.IOPS, IOWeight: req.IOWeight, Pids: req.Pids,
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
	for k, v := range map[string]int64{"cpu_quota_percent": int64(lim.CPUQuotaPercent), "io_bps": lim.IOBytesPerSec, "iops": lim.IOPS, "io_weight": int64(lim.IOWeight)} {
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
			IOBps: lim.IOBytesPerSec, IOPS: lim.IOPS, IOWeight: lim.IOWeight, Pids: lim.Pids,
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
	}
}
