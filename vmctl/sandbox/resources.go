package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmctl/cgroup"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
)

// How a limit is enforced: the values of LimitStatus.Enforcement (the
// not-enforced case is NotEnforced + ": " + why).
const (
	EnforcedLibvirt = "libvirt" // domain XML: libvirt writes the cgroup or QEMU throttles
	EnforcedCgroup  = "cgroup"  // agentbox wrote the domain's cgroup file itself
	EnforcedQEMU    = "qemu"    // the virtual disk's size: the guest cannot address more
	NotEnforced     = "not enforced"
)

// Names of the limits in ResourceLimits.Status.
const (
	LimitDisk        = "disk"
	LimitCPUQuota    = "cpu_quota"
	LimitMemoryHard  = "memory_hard_limit"
	LimitIOBps       = "io_bps"
	LimitIOPS        = "iops"
	LimitIOWeight    = "io_weight"
	LimitPids        = "pids"
	LimitTCGCacheMiB = "tcg_cache"
)

// DefaultPids is the task limit of a QEMU process when neither the request
// nor the image gives one: QEMU runs its main loop, one thread per vCPU,
// RCU and call threads and a block I/O worker pool of at most 64 threads,
// so 256 leaves room while stopping a runaway (or compromised) QEMU from
// filling the host's pid space.
const DefaultPids = 256

// MinMemoryMiB is the least guest RAM, in MiB, a create may ask for. The
// Nix guest module asserts the same floor for its images: below it the
// kernel, the agent and the commands' cgroup (which leaves 64 MiB of
// headroom to the agent, see vmctl/guestagent) do not fit, and a guest of
// 100 MiB was seen booting with a command cgroup of 580 KiB that thrashed
// forever. An image's own default is trusted (its profile checked it).
const MinMemoryMiB = 256

// MinIOBytesPerSec and MinIOPS are the lowest root disk throttles a create
// may ask for, in bytes/s and operations/s: the guest reads its root file
// system through the throttled disk while it boots, and below these the
// boot cannot reach the agent's handshake within the boot timeout (see
// RESOURCES.md for the measured boot I/O).
const (
	MinIOBytesPerSec = 1 << 20
	MinIOPS          = 10
)

// TCGCacheMiB is the TCG translation cache agentbox gives TCG domains
// (QEMU's default is 1 GiB, which would count toward the memory limit).
const TCGCacheMiB = 256

// ResourceRequest is what a create asks for beyond vCPUs and memory. Zero
// fields take the image's default (image.Resources), then agentbox's.
type ResourceRequest struct {
	// DiskMiB is the root disk's size (the overlay's virtual size), in
	// MiB; at least the image's disk. 0: the image's default, else the
	// image's disk size.
	DiskMiB int64
	// CPUQuotaPercent caps the whole VM at this percentage of one host
	// CPU (libvirt <cputune> global_quota), at most 100 per vCPU (a VM
	// cannot use more); 0: the image's default (lowered to 100 per vCPU),
	// else none.
	CPUQuotaPercent int
	// IOBytesPerSec and IOPS throttle the root disk (reads and writes
	// together; libvirt <iotune> total_bytes_sec, total_iops_sec), at
	// least MinIOBytesPerSec and MinIOPS; 0: none.
	IOBytesPerSec int64
	IOPS          int64
	// IOWeight is the relative block I/O weight 100..1000 (libvirt
	// <blkiotune><weight>); 0: none.
	IOWeight int
	// Pids caps the host tasks (processes and threads) of the QEMU
	// process (cgroup pids.max), at least 32; 0: DefaultPids.
	Pids int64
}

// LimitStatus says whether and how one limit is in force.
type LimitStatus struct {
	// Name is one of the Limit* constants.
	Name string `json:"name"`
	// Value and Unit give the limit ("MiB", "percent", "bytes/s",
	// "ops/s", "weight", "tasks").
	Value int64  `json:"value"`
	Unit  string `json:"unit"`
	// Enforcement is EnforcedLibvirt, EnforcedCgroup, EnforcedQEMU or
	// "not enforced: <why>".
	Enforcement string `json:"enforcement"`
	// Detail names the mechanism: the XML element or the cgroup file.
	Detail string `json:"detail,omitempty"`
}

// Enforced reports whether the limit is in force.
func (s LimitStatus) Enforced() bool { return !strings.HasPrefix(s.Enforcement, NotEnforced) }

// ResourceLimits are a sandbox's resolved host-side limits and how each is
// enforced, kept in its Record.
type ResourceLimits struct {
	// DiskMiB is the root disk's virtual size in MiB.
	DiskMiB int64 `json:"disk_mib"`
	// CPUQuotaPercent, IOBytesPerSec, IOPS, IOWeight: see ResourceRequest;
	// 0 means none.
	CPUQuotaPercent int   `json:"cpu_quota_percent,omitempty"`
	IOBytesPerSec   int64 `json:"io_bps,omitempty"`
	IOPS            int64 `json:"iops,omitempty"`
	IOWeight        int   `json:"io_weight,omitempty"`
	// MemoryHardLimitMiB is the QEMU process's memory limit, guest RAM
	// plus QEMU's overhead (see MemoryHardLimitMiB).
	MemoryHardLimitMiB int64 `json:"memory_hard_limit_mib"`
	// Pids is the QEMU process's task limit.
	Pids int64 `json:"pids"`
	// Status lists every limit with its enforcement.
	Status []LimitStatus `json:"status,omitempty"`
	// MadeCgroups are the cgroup directories agentbox made for the domain
	// (v1 pids, which libvirt leaves out); they are removed after the
	// domain ends, also by a daemon that adopted the sandbox.
	MadeCgroups []string `json:"made_cgroups,omitempty"`
}

// clone returns a deep copy of r (nil for nil).
func (r *ResourceLimits) clone() *ResourceLimits {
	if r == nil {
		return nil
	}
	c := *r
	c.Status = append([]LimitStatus(nil), r.Status...)
	c.MadeCgroups = append([]string(nil), r.MadeCgroups...)
	return &c
}

// forRestore is a copy of a snapshot source's (or warm template's) limits
// for the sandbox restored from it: the same values, without the source's
// enforcement records and cgroups (startDomainWith and applyResources
// record the restored domain's own). nil for nil.
func (r *ResourceLimits) forRestore() *ResourceLimits {
	c := r.clone()
	if c != nil {
		c.Status, c.MadeCgroups = nil, nil
	}
	return c
}

// QEMUOverheadMiB is QEMU's own resident memory besides the guest's RAM
// and the TCG translation cache, with margin: measured 122 MiB after boot
// and 195 MiB (translation cache included) after a busy guest, for 256,
// 512 and 1024 MiB TCG guests of the test image (see RESOURCES.md).
const QEMUOverheadMiB = 160

// MemoryHardLimitMiB is the memory limit agentbox puts on a QEMU process
// running a guest of guestMiB: 8/5 of the most it uses normally — the
// guest's RAM all touched (page cache fills it sooner or later), plus
// QEMUOverheadMiB, plus TCGCacheMiB filled for a TCG domain — rounded up.
// A normally busy guest therefore stays at or below 62.5 % of the limit,
// well under the daemon's 80 % warning; a QEMU that grows past its normal
// use by 28 % is warned about and by 52 % stopped (95 %), before the
// kernel kills it at the limit.
func MemoryHardLimitMiB(guestMiB int64, tcg bool) int64 {
	n := guestMiB + QEMUOverheadMiB
	if tcg {
		n += TCGCacheMiB
	}
	return (n*8 + 4) / 5
}

// ResolveResources applies the image's defaults to a create's request:
// vCPUs, memory (MiB) and the ResourceRequest, as Create will (an image's
// default CPU quota is lowered to 100 % per vCPU). It does no I/O and no
// range checks (Create refuses bad requests with ErrInvalid); the disk's
// lower bound (the image's virtual size) is checked by Create.
func ResolveResources(img *image.Image, vcpus, memoryMiB int, req ResourceRequest) (int, int, ResourceRequest) {
	res := img.Manifest.Resources
	vcpus, memoryMiB = pick(vcpus, res.VCPUs), pick(memoryMiB, res.MemoryMiB)
	if req.DiskMiB == 0 {
		req.DiskMiB = res.DiskMiB
	}
	if req.CPUQuotaPercent == 0 {
		req.CPUQuotaPercent = res.CPUQuotaPercent
		if vcpus > 0 { // an image's default made for more vCPUs
			req.CPUQuotaPercent = min(req.CPUQuotaPercent, 100*vcpus)
		}
	}
	if req.Pids == 0 {
		req.Pids = DefaultPids
	}
	return vcpus, memoryMiB, req
}

// checkRequest validates a create's explicit resources before the
// image's defaults apply: memoryMiB is the requested guest RAM (0: the
// image's), vcpus the resolved vCPU count, r the request. Each error
// names the value, the bound and what to ask for; errors wrap ErrInvalid.
func checkRequest(vcpus, memoryMiB int, r ResourceRequest) error {
	switch {
	case memoryMiB < 0 || (memoryMiB > 0 && memoryMiB < MinMemoryMiB):
		return fmt.Errorf("%w: memory %d MiB is below the minimum of %d MiB a guest needs (kernel, agent and commands): ask for at least %d MiB", ErrInvalid, memoryMiB, MinMemoryMiB, MinMemoryMiB)
	case r.DiskMiB < 0:
		return fmt.Errorf("%w: disk %d MiB: want a positive size", ErrInvalid, r.DiskMiB)
	case r.CPUQuotaPercent < 0 || r.CPUQuotaPercent > domain.MaxCPUQuotaPercent:
		return fmt.Errorf("%w: cpu quota %d%%: want 1..%d (percent of one host CPU)", ErrInvalid, r.CPUQuotaPercent, domain.MaxCPUQuotaPercent)
	case vcpus > 0 && r.CPUQuotaPercent > 100*vcpus:
		return fmt.Errorf("%w: cpu quota %d%% has no effect on %d vCPU(s): a VM uses at most 100%% per vCPU; ask for at most %d%%, or for more vCPUs", ErrInvalid, r.CPUQuotaPercent, vcpus, 100*vcpus)
	case r.IOBytesPerSec < 0 || (r.IOBytesPerSec > 0 && r.IOBytesPerSec < MinIOBytesPerSec):
		return fmt.Errorf("%w: io throughput cap %d bytes/s is below the minimum of %d bytes/s (1 MiB/s) the guest needs to boot from its throttled disk: ask for at least %d, or 0 for none", ErrInvalid, r.IOBytesPerSec, MinIOBytesPerSec, MinIOBytesPerSec)
	case r.IOPS < 0 || (r.IOPS > 0 && r.IOPS < MinIOPS):
		return fmt.Errorf("%w: io operations cap %d ops/s is below the minimum of %d ops/s the guest needs to boot from its throttled disk: ask for at least %d, or 0 for none", ErrInvalid, r.IOPS, MinIOPS, MinIOPS)
	case r.IOWeight != 0 && (r.IOWeight < domain.MinBlkioWeight || r.IOWeight > domain.MaxBlkioWeight):
		return fmt.Errorf("%w: io weight %d: want %d..%d", ErrInvalid, r.IOWeight, domain.MinBlkioWeight, domain.MaxBlkioWeight)
	case r.Pids < 0 || (r.Pids > 0 && r.Pids < 32):
		return fmt.Errorf("%w: pids %d: QEMU needs at least 32 host tasks (0: the default, %d)", ErrInvalid, r.Pids, DefaultPids)
	}
	return nil
}

// prepareResources resolves sb's limits from opts and the image, checks
// the disk against the image's virtual size and records them. Called by
// Create before anything is made.
func (m *Manager) prepareResources(ctx context.Context, sb *Sandbox, opts Options) error {
	if err := checkRequest(sb.VCPUs, opts.MemoryMiB, opts.Resources); err != nil {
		return err
	}
	_, _, req := ResolveResources(opts.Image, sb.VCPUs, 0, opts.Resources)
	base, err := overlay.Inspect(ctx, opts.Image.Disk)
	if err != nil {
		return fmt.Errorf("image disk: %w", err)
	}
	baseMiB := int64((base.VirtualSize + 1<<20 - 1) >> 20)
	switch {
	case req.DiskMiB == 0:
		req.DiskMiB = baseMiB
	case uint64(req.DiskMiB)<<20 < base.VirtualSize:
		return fmt.Errorf("%w: disk %d MiB is smaller than the image's disk of %d MiB (%d bytes): ask for at least %d MiB", ErrInvalid, req.DiskMiB, baseMiB, base.VirtualSize, baseMiB)
	}
	tcg := opts.Accel.DomainType == string(domain.TypeQEMU)
	lim := ResourceLimits{
		DiskMiB: req.DiskMiB, CPUQuotaPercent: req.CPUQuotaPercent,
		IOBytesPerSec: req.IOBytesPerSec, IOPS: req.IOPS, IOWeight: req.IOWeight,
		MemoryHardLimitMiB: MemoryHardLimitMiB(int64(sb.Memory), tcg), Pids: req.Pids,
	}
	sb.mu.Lock()
	sb.rec.Resources = &lim
	sb.mu.Unlock()
	return nil
}

// diskBytes is the overlay's virtual size (0: the backing file's).
func (sb *Sandbox) diskBytes() uint64 {
	if r := sb.Record().Resources; r != nil {
		return uint64(r.DiskMiB) << 20
	}
	return 0
}

// libvirtHardLimit is cleared once libvirt failed to apply a memory hard
// limit on this host (it must raise the memlock rlimit, which needs
// CAP_SYS_RESOURCE); agentbox then writes the cgroup itself.
var libvirtHardLimit atomic.Bool

func init() { libvirtHardLimit.Store(true) }

// warnedLimits holds the limit names already logged as not enforced.
var warnedLimits sync.Map

// memlockFailure matches libvirt's error when it cannot raise the memlock
// rlimit to the hard limit.
func memlockFailure(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cannot limit locked memory")
}

// tune is the domain XML's share of sb's limits (see domain.Tune). The
// memory hard limit goes to libvirt unless libvirt failed to apply one on
// this host before.
func (m *Manager) tune(sb *Sandbox, typ domain.Type) domain.Tune {
	lim := sb.Record().Resources
	if lim == nil {
		return domain.Tune{}
	}
	t := domain.Tune{
		CPUQuotaPercent: uint(lim.CPUQuotaPercent),
		BlkioWeight:     uint(lim.IOWeight),
		DiskBytesPerSec: uint64(lim.IOBytesPerSec),
		DiskIOPS:        uint64(lim.IOPS),
	}
	if typ == domain.TypeQEMU {
		t.TCGCacheMiB = TCGCacheMiB
	}
	if libvirtHardLimit.Load() {
		t.MemoryHardLimitMiB = uint64(lim.MemoryHardLimitMiB)
	}
	return t
}

// startDomain starts the domain of spec (with tune's limits). A memory
// hard limit libvirt cannot apply on this host is retried without it
// (and remembered); applyResources then sets it on the cgroup. It records
// how each XML limit is enforced.
func (m *Manager) startDomain(ctx context.Context, sb *Sandbox, spec domain.Spec) error {
	return m.startDomainWith(ctx, sb, &spec, m.cfg.Driver.StartDomain)
}

// startDomainWith is startDomain with another start function, e.g. a
// Snapshotter's StartDomainPaused for a restore, a warm create or a pool
// member, so every way a domain starts records the same enforcement.
// spec.Tune loses the memory hard limit when libvirt could not apply it.
func (m *Manager) startDomainWith(ctx context.Context, sb *Sandbox, spec *domain.Spec, start func(context.Context, domain.Spec) error) error {
	lim := sb.Record().Resources
	if lim == nil {
		return start(ctx, *spec)
	}
	viaLibvirt := spec.Tune.MemoryHardLimitMiB > 0
	err := start(ctx, *spec)
	if viaLibvirt && memlockFailure(err) {
		libvirtHardLimit.Store(false)
		m.log.Info("libvirt cannot apply <memtune><hard_limit> on this host (libvirtd lacks CAP_SYS_RESOURCE to raise the memlock rlimit); agentbox sets the memory cgroup limit itself",
			"sandbox", sb.ID, "err", err)
		spec.Tune.MemoryHardLimitMiB = 0
		viaLibvirt = false
		err = start(ctx, *spec)
	}
	if err != nil {
		return err
	}
	st := []LimitStatus{{Name: LimitDisk, Value: lim.DiskMiB, Unit: "MiB", Enforcement: EnforcedQEMU, Detail: "qcow2 overlay virtual size"}}
	if lim.CPUQuotaPercent > 0 {
		st = append(st, LimitStatus{Name: LimitCPUQuota, Value: int64(lim.CPUQuotaPercent), Unit: "percent", Enforcement: EnforcedLibvirt, Detail: "<cputune><global_quota>"})
	}
	if viaLibvirt {
		st = append(st, LimitStatus{Name: LimitMemoryHard, Value: lim.MemoryHardLimitMiB, Unit: "MiB", Enforcement: EnforcedLibvirt, Detail: "<memtune><hard_limit>"})
	}
	if lim.IOBytesPerSec > 0 {
		st = append(st, LimitStatus{Name: LimitIOBps, Value: lim.IOBytesPerSec, Unit: "bytes/s", Enforcement: EnforcedLibvirt, Detail: "<iotune><total_bytes_sec>"})
	}
	if lim.IOPS > 0 {
		st = append(st, LimitStatus{Name: LimitIOPS, Value: lim.IOPS, Unit: "ops/s", Enforcement: EnforcedLibvirt, Detail: "<iotune><total_iops_sec>"})
	}
	if lim.IOWeight > 0 {
		st = append(st, LimitStatus{Name: LimitIOWeight, Value: int64(lim.IOWeight), Unit: "weight", Enforcement: EnforcedLibvirt,
			Detail: "<blkiotune><weight> (proportional: takes effect only under an I/O scheduler with weights, BFQ)"})
	}
	if spec.Tune.TCGCacheMiB > 0 {
		st = append(st, LimitStatus{Name: LimitTCGCacheMiB, Value: int64(spec.Tune.TCGCacheMiB), Unit: "MiB", Enforcement: EnforcedLibvirt, Detail: "<features><tcg><tb-cache>"})
	}
	sb.mu.Lock()
	sb.rec.Resources.Status = st
	sb.mu.Unlock()
	return nil
}

// applyResources writes the limits libvirt does not set into the running
// domain's cgroups: the memory limit when libvirt could not, and pids.max.
// A limit that cannot be set is recorded as not enforced and logged; it
// does not fail the create. The groups agentbox made are removed once the
// QEMU process has ended (polled every 2 s, in the background).
func (m *Manager) applyResources(ctx context.Context, sb *Sandbox) {
	lim := sb.Record().Resources
	if lim == nil {
		return
	}
	var st []LimitStatus
	hasMem := false
	for _, s := range lim.Status {
		hasMem = hasMem || s.Name == LimitMemoryHard
	}
	notEnforced := func(name string, v int64, unit string, err error) LimitStatus {
		if _, seen := warnedLimits.LoadOrStore(name, true); !seen {
			m.log.Warn("resource limit not enforced on this host (warned once per limit; inspect shows it per sandbox)", "sandbox", sb.ID, "limit", name, "value", v, "err", err)
		}
		return LimitStatus{Name: name, Value: v, Unit: unit, Enforcement: NotEnforced + ": " + err.Error()}
	}
	var g *cgroup.Group
	ud, ok := m.cfg.Driver.(UsageDriver)
	var err error
	if !ok {
		err = errors.New("the driver cannot report the QEMU process id")
	} else {
		var pid int
		if pid, err = ud.DomainPID(ctx, sb.Domain); err == nil {
			g, err = cgroup.Of(pid, cgroup.Options{})
		}
	}
	if !hasMem {
		if err == nil {
			var file string
			if file, err = g.SetMemoryMax(lim.MemoryHardLimitMiB << 20); err == nil {
				st = append(st, LimitStatus{Name: LimitMemoryHard, Value: lim.MemoryHardLimitMiB, Unit: "MiB", Enforcement: EnforcedCgroup, Detail: file})
			}
		}
		if err != nil {
			st = append(st, notEnforced(LimitMemoryHard, lim.MemoryHardLimitMiB, "MiB", err))
		}
	}
	if g != nil {
		if file, perr := g.SetPidsMax(lim.Pids); perr == nil {
			st = append(st, LimitStatus{Name: LimitPids, Value: lim.Pids, Unit: "tasks", Enforcement: EnforcedCgroup, Detail: file})
		} else {
			st = append(st, notEnforced(LimitPids, lim.Pids, "tasks", perr))
		}
		if made := g.Made(); len(made) > 0 {
			sb.mu.Lock()
			sb.rec.Resources.MadeCgroups = made
			sb.mu.Unlock()
			go sb.removeWhenEmpty(made)
		}
	} else {
		st = append(st, notEnforced(LimitPids, lim.Pids, "tasks", err))
	}
	sb.mu.Lock()
	sb.rec.Resources.Status = append(sb.rec.Resources.Status, st...)
	sb.mu.Unlock()
}

// removeWhenEmpty deletes the groups agentbox made for a domain once its
// QEMU process has left them (rmdir fails with EBUSY until then), trying
// every 2 s until the sandbox is final; releaseResources does it at once
// after a destroy.
func (sb *Sandbox) removeWhenEmpty(dirs []string) {
	for {
		time.Sleep(2 * time.Second)
		if removeDirs(dirs) == nil || sb.State().Final() {
			sb.releaseResources()
			return
		}
	}
}

// releaseResources removes the cgroups agentbox made for sb's domain
// (listed in its record), after the domain ended.
func (sb *Sandbox) releaseResources() {
	r := sb.Record().Resources
	if r == nil || len(r.MadeCgroups) == 0 {
		return
	}
	if err := removeDirs(r.MadeCgroups); err != nil {
		sb.mgr.log.Warn("cgroup of a stopped sandbox not removed", "sandbox", sb.ID, "err", err)
	}
}

// removeDirs removes empty cgroup directories; missing ones are fine.
func removeDirs(dirs []string) error {
	var errs []error
	for _, dir := range dirs {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// UsageDriver is the part of a driver that reports a running domain's
// live statistics and its QEMU process (vmctl/libvirt.Driver implements
// it). Drivers without it give sandboxes without usage figures and
// without cgroup-set limits.
type UsageDriver interface {
	// DomainUsage samples the domain's statistics (libvirt
	// virConnectGetAllDomainStats).
	DomainUsage(ctx context.Context, name string) (DomainUsage, error)
	// DomainPID returns the QEMU process id of the running domain.
	DomainPID(ctx context.Context, name string) (int, error)
}

// DomainUsage is what the hypervisor reports about a running domain.
type DomainUsage struct {
	// State is the domain state ("running", "paused", …); PauseReason
	// says why a paused domain is paused ("ioerror": QEMU paused the guest
	// on a host write error such as ENOSPC, "user", …).
	State, PauseReason string
	// CPUTimeNs is the QEMU process's CPU time in nanoseconds.
	CPUTimeNs uint64
	// RSSBytes is the QEMU process's resident memory in bytes.
	RSSBytes uint64
	// DiskAllocationBytes, DiskPhysicalBytes, DiskCapacityBytes: the
	// overlay's highest written offset, its host allocation and its
	// virtual size, in bytes.
	DiskAllocationBytes, DiskPhysicalBytes, DiskCapacityBytes uint64
	// NetRxBytes and NetTxBytes count the domain's network traffic.
	NetRxBytes, NetTxBytes uint64
}

// Usage is one sample of a running sandbox's resource use.
type Usage struct {
	// SampledAt is when it was read (UTC).
	SampledAt time.Time `json:"sampled_at"`
	// DomainState is the hypervisor's state of the domain; PauseReason is
	// set when it is paused (e.g. "ioerror").
	DomainState string `json:"domain_state"`
	PauseReason string `json:"pause_reason,omitempty"`
	// CPUTimeNs is the QEMU process's CPU time, in nanoseconds.
	CPUTimeNs uint64 `json:"cpu_time_ns"`
	// MemoryRSSBytes is the QEMU process's resident memory, in bytes;
	// MemoryLimitBytes its hard limit (0: none).
	MemoryRSSBytes   uint64 `json:"memory_rss_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	// DiskBytes is the host space the overlay occupies; DiskCapBytes the
	// disk's virtual size, which the overlay's data cannot exceed.
	DiskBytes    uint64 `json:"disk_bytes"`
	DiskCapBytes uint64 `json:"disk_cap_bytes"`
	// NetRxBytes and NetTxBytes are the bytes the guest's interfaces
	// received and sent (0 without a network).
	NetRxBytes uint64 `json:"net_rx_bytes"`
	NetTxBytes uint64 `json:"net_tx_bytes"`
	// Pids and PidsMax are the QEMU process's host tasks and their limit
	// (pids.current, pids.max); -1 when unknown.
	Pids    int64 `json:"pids"`
	PidsMax int64 `json:"pids_max"`
}

// Usage samples the running sandbox's resource use from the driver's
// statistics and the QEMU process's cgroups. Errors: ErrNotRunning, the
// driver has no statistics (ErrInvalid), the hypervisor's errors.
func (m *Manager) Usage(ctx context.Context, sb *Sandbox) (Usage, error) {
	if sb.State() != StateRunning {
		return Usage{}, sb.notRunning()
	}
	ud, ok := m.cfg.Driver.(UsageDriver)
	if !ok {
		return Usage{}, fmt.Errorf("%w: the driver reports no usage", ErrInvalid)
	}
	du, err := ud.DomainUsage(ctx, sb.Domain)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{
		SampledAt: time.Now().UTC(), DomainState: du.State, PauseReason: du.PauseReason,
		CPUTimeNs: du.CPUTimeNs, MemoryRSSBytes: du.RSSBytes,
		DiskBytes: du.DiskPhysicalBytes, DiskCapBytes: du.DiskCapacityBytes,
		NetRxBytes: du.NetRxBytes, NetTxBytes: du.NetTxBytes, Pids: -1, PidsMax: -1,
	}
	if lim := sb.Record().Resources; lim != nil {
		for _, s := range lim.Status {
			if s.Name == LimitMemoryHard && s.Enforced() {
				u.MemoryLimitBytes = uint64(s.Value) << 20
			}
		}
	}
	if pid, err := ud.DomainPID(ctx, sb.Domain); err == nil {
		if g, err := cgroup.Of(pid, cgroup.Options{}); err == nil {
			cs := g.Stats()
			u.Pids, u.PidsMax = cs.Pids, cs.PidsMax
		}
	}
	return u, nil
}
