package daemon

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

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
	NetBps          int64 // --max-net-rate, bytes/s each direction (netrate.go)
}

// admission decides whether the daemon takes new work, in three checks:
// none once Shutdown began (admitting, 503), no create above the
// Ceilings (applyCeilings, 422), and no create or restore that would
// commit more memory or vCPUs than the host's capacity (admit, the
// manager's Admit hook, 429). It holds the capacity figures that Info
// and the agentbox_capacity gauges report.
type admission struct {
	memoryMiB int    // Config.CapacityMemoryMiB, defaulted
	vcpus     int    // Config.CapacityVCPUs, defaulted
	hint      string // Config.CapacityHint, defaulted
	ceilings  Ceilings
	refused   prometheus.Counter // agentbox_admission_refused_total
	closing   atomic.Bool        // Shutdown began
}

// newAdmission takes the capacity and ceilings from cfg; a capacity of
// zero takes its default: the host's memory minus 1 GiB (at least half
// of it) and 4 vCPUs per host CPU. refused counts the creates admit
// refuses.
func newAdmission(cfg Config, refused prometheus.Counter) *admission {
	a := &admission{memoryMiB: cfg.CapacityMemoryMiB, vcpus: cfg.CapacityVCPUs, hint: cfg.CapacityHint, ceilings: cfg.Ceilings, refused: refused}
	if a.hint == "" {
		a.hint = "remove sandboxes, ask for less, or raise --capacity-memory/--capacity-vcpus"
	}
	if a.memoryMiB <= 0 {
		a.memoryMiB = defaultMemoryMiB()
	}
	if a.vcpus <= 0 {
		a.vcpus = 4 * runtime.NumCPU()
	}
	return a
}

// defaultMemoryMiB is the host's memory minus 1 GiB for the host itself,
// but at least half of it.
func defaultMemoryMiB() int {
	total := hostMemoryMiB()
	if total <= 0 {
		return 4096
	}
	return max(total-1024, total/2)
}

// close makes admitting refuse from now on (Shutdown).
func (a *admission) close() { a.closing.Store(true) }

// admitting refuses new work once Shutdown began.
func (a *admission) admitting() error {
	if a.closing.Load() {
		return errdefs.ErrUnavailable.WithMessage("the daemon is shutting down: retry against the restarted daemon")
	}
	return nil
}

// admit is admission control: a create that would commit more memory or
// vCPUs than the configured capacity is refused with 429 and the numbers.
func (a *admission) admit(r sandbox.Resources) error {
	err := a.check(r)
	if err != nil {
		a.refused.Inc()
	}
	return err
}

// check is admit without counting a refusal: the capacity error for r,
// nil when it fits (Daemon.Room asks it before a cluster node pulls).
func (a *admission) check(r sandbox.Resources) error {
	need := r.MemoryMiB - r.SharedMiB // a clone's template RAM that live clones already count is not committed again
	memOK := r.UsedMemoryMiB+need <= a.memoryMiB
	cpuOK := r.UsedVCPUs+r.VCPUs <= a.vcpus
	if memOK && cpuOK {
		return nil
	}
	shared := ""
	if r.SharedMiB > 0 {
		shared = fmt.Sprintf(" (%d MiB of its %d MiB guest RAM shared with live clones of its memory template)", r.SharedMiB, r.MemoryMiB)
	}
	msg := fmt.Sprintf("host capacity exceeded: the sandbox needs %d MiB%s and %d vCPUs; %d of %d MiB and %d of %d vCPUs are committed: %s",
		need, shared, r.VCPUs, r.UsedMemoryMiB, a.memoryMiB, r.UsedVCPUs, a.vcpus, a.hint)
	details := map[string]any{
		"requested_memory_mib": need, "requested_vcpus": r.VCPUs,
		"used_memory_mib": r.UsedMemoryMiB, "used_vcpus": r.UsedVCPUs,
		"capacity_memory_mib": a.memoryMiB, "capacity_vcpus": a.vcpus,
	}
	return errdefs.WithDetails(errCapacity.WithMessage(msg), details)
}

// applyCeilings checks a create against the daemon's ceilings after the
// image's defaults are applied, and fills unset capped values with their
// ceiling. Errors are 422 with the numbers.
func (a *admission) applyCeilings(ctx context.Context, img *image.Image, req *api.CreateSandboxRequest) error {
	c := a.ceilings
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

// ceilingError is the 422 of a request above a ceiling.
func ceilingError(what string, got, ceiling int64, unit, flag string) error {
	msg := fmt.Sprintf("%s %d%s is above the daemon's ceiling of %d%s (%s): ask for at most %d%s",
		what, got, unit, ceiling, unit, flag, ceiling, unit)
	return errdefs.WithDetails(errdefs.ErrFailedPrecondition.WithMessage(msg),
		map[string]any{"resource": what, "requested": got, "ceiling": ceiling, "flag": flag})
}
