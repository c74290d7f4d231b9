package daemon

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
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

// Thresholds are the usage levels, in percent of a limit, at which the
// daemon warns (audit entry "resource" and event "sandbox.resource") and
// acts (stops the sandbox, reason naming the numbers): QEMU's resident
// memory against its hard limit, the overlay's host bytes against the
// disk's size. Zero fields take the defaults, 80 and 95; a negative one
// turns that level off.
type Thresholds struct {
	WarnPercent int
	ActPercent  int
}

// DefaultUsageInterval is how often the daemon samples the usage of its
// running sandboxes when Config.UsageInterval is zero.
const DefaultUsageInterval = 5 * time.Second

// ActionResource is the audit action of a usage threshold crossed (warn
// or act); its args say which limit, the numbers and what was done.
const ActionResource = "resource"

// usageMonitor is the daemon's usage monitor state.
type usageMonitor struct {
	mu     sync.Mutex
	usage  map[string]resources.Usage // by sandbox ID: the latest sample
	warned map[string]bool            // sandbox ID + limit: a warning was given
	done   chan struct{}
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
// latest usage sample to its API view.
func (d *Daemon) viewResources(r sandbox.Record, v *api.Sandbox) {
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
	d.res.mu.Lock()
	u, ok := d.res.usage[r.ID]
	d.res.mu.Unlock()
	if ok {
		v.Usage = &api.Usage{
			SampledAt: u.SampledAt, DomainState: u.DomainState, PauseReason: u.PauseReason,
			CPUTimeNs: u.CPUTimeNs, MemoryRSSBytes: u.MemoryRSSBytes, MemoryLimitBytes: u.MemoryLimitBytes,
			DiskBytes: u.DiskBytes, DiskCapBytes: u.DiskCapBytes, NetRxBytes: u.NetRxBytes, NetTxBytes: u.NetTxBytes,
			Pids: u.Pids, PidsMax: u.PidsMax,
		}
	}
}

// startUsageMonitor samples every running sandbox's usage each
// Config.UsageInterval until ctx ends, keeps the latest sample for the
// API and metrics, and applies the thresholds.
func (d *Daemon) startUsageMonitor(ctx context.Context) {
	d.res.usage, d.res.warned, d.res.done = map[string]resources.Usage{}, map[string]bool{}, make(chan struct{})
	interval := d.cfg.UsageInterval
	if interval <= 0 {
		interval = DefaultUsageInterval
	}
	d.metrics.reg.MustRegister(&usageCollector{d: d})
	go func() {
		defer close(d.res.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			d.sampleUsage(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// waitUsageMonitor waits for the monitor to end (after its context).
func (d *Daemon) waitUsageMonitor() {
	if d.res.done != nil {
		<-d.res.done
	}
}

// sampleUsage reads every running sandbox's usage once.
func (d *Daemon) sampleUsage(ctx context.Context) {
	live := map[string]bool{}
	for _, sb := range d.mgr.List() {
		if sb.State() != sandbox.StateRunning {
			continue
		}
		live[sb.ID] = true
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		u, err := d.limits.Usage(cctx, sb)
		cancel()
		if err != nil {
			continue
		}
		d.res.mu.Lock()
		prev, had := d.res.usage[sb.ID]
		d.res.usage[sb.ID] = u
		d.res.mu.Unlock()
		if u.DomainState == "paused" && (!had || prev.DomainState != "paused") {
			d.resourceEvent(sb, "paused", fmt.Sprintf("the domain is paused (%s)", orUnknown(u.PauseReason)), "warn", nil)
		}
		d.checkThresholds(sb, u)
	}
	d.res.mu.Lock()
	for id := range d.res.usage {
		if !live[id] {
			delete(d.res.usage, id)
		}
	}
	for key := range d.res.warned {
		if id, _, _ := strings.Cut(key, "/"); !live[id] {
			delete(d.res.warned, key)
		}
	}
	d.res.mu.Unlock()
}

func orUnknown(s string) string {
	if s == "" {
		return "reason unknown"
	}
	return s
}

// thresholds returns the warn and act levels in percent (≤ 0: off).
func (d *Daemon) thresholds() (warn, act int) {
	warn, act = d.cfg.Thresholds.WarnPercent, d.cfg.Thresholds.ActPercent
	if warn == 0 {
		warn = 80
	}
	if act == 0 {
		act = 95
	}
	return warn, act
}

// checkThresholds warns once per sandbox and limit when usage crosses the
// warn level, and stops the sandbox when it crosses the act level.
func (d *Daemon) checkThresholds(sb *sandbox.Sandbox, u resources.Usage) {
	warn, act := d.thresholds()
	for _, c := range []struct {
		limit     string
		used, cap uint64
		what      string
	}{
		{"memory", u.MemoryRSSBytes, u.MemoryLimitBytes, "QEMU resident memory"},
		{"disk", u.DiskBytes, u.DiskCapBytes, "overlay disk use"},
	} {
		if c.cap == 0 {
			continue
		}
		pct := int(c.used * 100 / c.cap)
		msg := fmt.Sprintf("%s %d MiB is %d%% of its %d MiB limit", c.what, c.used>>20, pct, c.cap>>20)
		args := map[string]any{"limit": c.limit, "used_bytes": c.used, "limit_bytes": c.cap, "percent": pct}
		if warn > 0 && pct >= warn && d.firstTime(sb.ID+"/warn/"+c.limit) {
			d.resourceEvent(sb, c.limit, msg+fmt.Sprintf(" (warn threshold %d%%)", warn), "warn", args)
		}
		if act > 0 && pct >= act && d.firstTime(sb.ID+"/act") {
			d.resourceEvent(sb, c.limit, msg+fmt.Sprintf(" (act threshold %d%%): stopping the sandbox", act), "stop", args)
			go func() {
				if err := d.mgr.Stop(context.Background(), sb, msg); err != nil {
					d.log.Warn("stop sandbox over its threshold", "sandbox", sb.ID, "err", err)
				}
			}()
			return
		}
	}
}

// firstTime reports whether key is seen for the first time (and marks
// it).
func (d *Daemon) firstTime(key string) bool {
	d.res.mu.Lock()
	defer d.res.mu.Unlock()
	if d.res.warned[key] {
		return false
	}
	d.res.warned[key] = true
	return true
}

// resourceEvent audits and publishes a usage warning or action.
func (d *Daemon) resourceEvent(sb *sandbox.Sandbox, limit, reason, action string, args map[string]any) {
	if args == nil {
		args = map[string]any{"limit": limit}
	}
	args["reason"], args["action"] = reason, action
	d.appendAudit(audit.Entry{Time: time.Now().UTC(), Sandbox: sb.ID, Caller: "daemon", Action: ActionResource, Args: args})
	d.events.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSandboxResource, Sandbox: sb.ID, Name: sb.Name, State: string(sb.State()), Reason: reason})
	d.log.Warn("sandbox resource threshold", "sandbox", sb.ID, "limit", limit, "action", action, "reason", reason)
}

// usageCollector exports the latest usage samples as gauges labelled by
// sandbox ID.
type usageCollector struct{ d *Daemon }

var usageDescs = map[string]*prometheus.Desc{
	"cpu":     prometheus.NewDesc("agentbox_sandbox_cpu_seconds", "CPU time of the sandbox's QEMU process (a counter sampled every few seconds).", []string{"sandbox"}, nil),
	"rss":     prometheus.NewDesc("agentbox_sandbox_memory_rss_bytes", "Resident memory of the sandbox's QEMU process.", []string{"sandbox"}, nil),
	"memlim":  prometheus.NewDesc("agentbox_sandbox_memory_limit_bytes", "Enforced memory hard limit of the sandbox's QEMU process (absent when none).", []string{"sandbox"}, nil),
	"disk":    prometheus.NewDesc("agentbox_sandbox_disk_bytes", "Host bytes the sandbox's overlay occupies.", []string{"sandbox"}, nil),
	"diskcap": prometheus.NewDesc("agentbox_sandbox_disk_cap_bytes", "Virtual size of the sandbox's disk.", []string{"sandbox"}, nil),
	"rx":      prometheus.NewDesc("agentbox_sandbox_network_receive_bytes", "Bytes the sandbox's interfaces received.", []string{"sandbox"}, nil),
	"tx":      prometheus.NewDesc("agentbox_sandbox_network_transmit_bytes", "Bytes the sandbox's interfaces sent.", []string{"sandbox"}, nil),
	"pids":    prometheus.NewDesc("agentbox_sandbox_host_tasks", "Host tasks (processes and threads) of the sandbox's QEMU process.", []string{"sandbox"}, nil),
	"paused":  prometheus.NewDesc("agentbox_sandbox_paused", "1 while the sandbox's domain is paused (e.g. QEMU stopped it on a host I/O error).", []string{"sandbox"}, nil),
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range usageDescs {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.d.res.mu.Lock()
	defer c.d.res.mu.Unlock()
	g := func(name string, v float64, id string) {
		ch <- prometheus.MustNewConstMetric(usageDescs[name], prometheus.GaugeValue, v, id)
	}
	for id, u := range c.d.res.usage {
		g("cpu", float64(u.CPUTimeNs)/1e9, id)
		g("rss", float64(u.MemoryRSSBytes), id)
		if u.MemoryLimitBytes > 0 {
			g("memlim", float64(u.MemoryLimitBytes), id)
		}
		g("disk", float64(u.DiskBytes), id)
		g("diskcap", float64(u.DiskCapBytes), id)
		g("rx", float64(u.NetRxBytes), id)
		g("tx", float64(u.NetTxBytes), id)
		if u.Pids >= 0 {
			g("pids", float64(u.Pids), id)
		}
		paused := 0.0
		if u.DomainState == "paused" {
			paused = 1
		}
		g("paused", paused, id)
	}
}
