// Package resources resolves, enforces and measures a sandbox's host-side
// resources: a create's ResourceRequest becomes the sandbox's
// ResourceLimits (Resolve: image defaults, checks), its domain starts with
// the share the domain XML carries and gets the rest written into its
// cgroups (Enforcer.Start), and Enforcer.Usage samples what a running
// sandbox uses. It implements sandbox.Limits; RESOURCES.md in the parent
// directory gives the measurements behind the numbers.
package resources

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmctl/cgroup"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
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

// MinNetBytesPerSec is the lowest network cap a create may ask for, in
// bytes/s: one burst's worth (network.MinRateBytes) per second.
const MinNetBytesPerSec = network.MinRateBytes

// DefaultTCGCacheMiB is the TCG translation cache, in MiB, agentbox
// gives TCG domains when the daemon sets none (`serve --tcg-cache`,
// WithTCGCacheMiB). QEMU's own default is 1 GiB, which a busy guest fills
// and which counts toward the memory limit. RESOURCES.md in the parent
// directory gives the measurements behind the choice.
const DefaultTCGCacheMiB = 256

// TCGCacheMiB is DefaultTCGCacheMiB (its former name).
const TCGCacheMiB = DefaultTCGCacheMiB

// MinTCGCacheMiB and MaxTCGCacheMiB bound the TCG translation cache a
// daemon may set, in MiB: below 32 MiB QEMU flushes the cache all the
// time while a guest boots; above 2 GiB QEMU refuses the size on x86-64
// hosts.
const (
	MinTCGCacheMiB = 32
	MaxTCGCacheMiB = 2048
)

// CheckTCGCacheMiB checks a TCG translation cache size in MiB (0: the
// default). Errors wrap sandbox.ErrInvalid and give the bounds.
func CheckTCGCacheMiB(mib int) error {
	if mib != 0 && (mib < MinTCGCacheMiB || mib > MaxTCGCacheMiB) {
		return fmt.Errorf("%w: TCG translation cache %d MiB: want %d..%d MiB, or 0 for the default of %d MiB", sandbox.ErrInvalid, mib, MinTCGCacheMiB, MaxTCGCacheMiB, DefaultTCGCacheMiB)
	}
	return nil
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
	if tcg {
		return HardLimitMiB(guestMiB, DefaultTCGCacheMiB)
	}
	return HardLimitMiB(guestMiB, 0)
}

// HardLimitMiB is MemoryHardLimitMiB with the TCG translation cache's
// size in MiB (0 for a KVM domain, which has none): 8/5 × (guestMiB +
// QEMUOverheadMiB + tcgCacheMiB), rounded up.
func HardLimitMiB(guestMiB, tcgCacheMiB int64) int64 {
	n := guestMiB + QEMUOverheadMiB + tcgCacheMiB
	return (n*8 + 4) / 5
}

// Resolve applies the image's defaults to a create's request: vCPUs,
// memory (MiB) and the ResourceRequest, as a create will (an image's
// default CPU quota is lowered to 100 % per vCPU). It does no I/O and no
// range checks (a create refuses bad requests with sandbox.ErrInvalid,
// see CheckRequest); the disk's lower bound (the image's virtual size) is
// checked by Enforcer.Resolve.
func Resolve(img *image.Image, vcpus, memoryMiB int, req sandbox.ResourceRequest) (int, int, sandbox.ResourceRequest) {
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

func pick(override, def int) int {
	if override > 0 {
		return override
	}
	return def
}

// rateText writes n bytes per second as --net-rate takes it: with a G,
// M or K suffix (GiB/s, MiB/s, KiB/s) when it is a whole number of one,
// else the bare number.
func rateText(n int64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.suffix)
		}
	}
	return fmt.Sprint(n)
}

// CheckRequest validates a create's explicit resources before the
// image's defaults apply: memoryMiB is the requested guest RAM (0: the
// image's), vcpus the resolved vCPU count, r the request. Each error
// names the value, the bound and what to ask for; errors wrap
// sandbox.ErrInvalid.
func CheckRequest(vcpus, memoryMiB int, r sandbox.ResourceRequest) error {
	switch {
	case memoryMiB < 0 || (memoryMiB > 0 && memoryMiB < MinMemoryMiB):
		return fmt.Errorf("%w: memory %d MiB is below the minimum of %d MiB a guest needs (kernel, agent and commands): ask for at least %d MiB", sandbox.ErrInvalid, memoryMiB, MinMemoryMiB, MinMemoryMiB)
	case r.DiskMiB < 0:
		return fmt.Errorf("%w: disk %d MiB: want a positive size", sandbox.ErrInvalid, r.DiskMiB)
	case r.CPUQuotaPercent < 0 || r.CPUQuotaPercent > domain.MaxCPUQuotaPercent:
		return fmt.Errorf("%w: cpu quota %d%%: want 1..%d (percent of one host CPU)", sandbox.ErrInvalid, r.CPUQuotaPercent, domain.MaxCPUQuotaPercent)
	case vcpus > 0 && r.CPUQuotaPercent > 100*vcpus:
		return fmt.Errorf("%w: cpu quota %d%% has no effect on %d vCPU(s): a VM uses at most 100%% per vCPU; ask for at most %d%%, or for more vCPUs", sandbox.ErrInvalid, r.CPUQuotaPercent, vcpus, 100*vcpus)
	case r.IOBytesPerSec < 0 || (r.IOBytesPerSec > 0 && r.IOBytesPerSec < MinIOBytesPerSec):
		return fmt.Errorf("%w: io throughput cap %d bytes/s is below the minimum of %d bytes/s (1 MiB/s) the guest needs to boot from its throttled disk: ask for at least %d, or 0 for none", sandbox.ErrInvalid, r.IOBytesPerSec, MinIOBytesPerSec, MinIOBytesPerSec)
	case r.IOPS < 0 || (r.IOPS > 0 && r.IOPS < MinIOPS):
		return fmt.Errorf("%w: io operations cap %d ops/s is below the minimum of %d ops/s the guest needs to boot from its throttled disk: ask for at least %d, or 0 for none", sandbox.ErrInvalid, r.IOPS, MinIOPS, MinIOPS)
	case r.IOWeight != 0 && (r.IOWeight < domain.MinBlkioWeight || r.IOWeight > domain.MaxBlkioWeight):
		return fmt.Errorf("%w: io weight %d: want %d..%d", sandbox.ErrInvalid, r.IOWeight, domain.MinBlkioWeight, domain.MaxBlkioWeight)
	case r.NetBytesPerSec < 0 || (r.NetBytesPerSec > 0 && r.NetBytesPerSec < MinNetBytesPerSec):
		return fmt.Errorf("%w: network cap %s (%d bytes/s) is below the minimum of %s (%d bytes/s): ask for at least %s, or 0 for none", sandbox.ErrInvalid,
			rateText(r.NetBytesPerSec), r.NetBytesPerSec, rateText(MinNetBytesPerSec), MinNetBytesPerSec, rateText(MinNetBytesPerSec))
	case r.Pids < 0 || (r.Pids > 0 && r.Pids < 32):
		return fmt.Errorf("%w: pids %d: QEMU needs at least 32 host tasks (0: the default, %d)", sandbox.ErrInvalid, r.Pids, DefaultPids)
	}
	return nil
}

// Enforcer implements sandbox.Limits on a Driver: the domain XML's limits
// (libvirt), the rest through the QEMU process's cgroups when the driver
// is a sandbox.UsageDriver. It also samples usage. It is safe for
// concurrent use.
type Enforcer struct {
	driver sandbox.Driver
	log    *slog.Logger
	// noLibvirtHardLimit is set once libvirt failed to apply a memory
	// hard limit through this Enforcer's driver (it must raise the
	// memlock rlimit, which needs CAP_SYS_RESOURCE); the memory cgroup is
	// written instead from then on. Per Enforcer, not per process: what
	// one libvirtd cannot do says nothing about another driver (a fake
	// one in tests).
	noLibvirtHardLimit atomic.Bool
	// cgroups is where Reconciling looks for leftover groups: the host's
	// (zero), a fake root in tests.
	cgroups cgroup.Options
	// tcgCacheMiB is the translation cache of new TCG domains
	// (WithTCGCacheMiB), in MiB.
	tcgCacheMiB int64
}

var _ sandbox.Limits = (*Enforcer)(nil)

// Option tunes an Enforcer (New).
type Option func(*Enforcer)

// WithTCGCacheMiB sets the TCG translation cache, in MiB, of the TCG
// domains the Enforcer resolves from now on (<features><tcg><tb-cache>;
// KVM domains have none); 0 keeps DefaultTCGCacheMiB. Check the value
// with CheckTCGCacheMiB first: New clamps it to MinTCGCacheMiB..
// MaxTCGCacheMiB.
func WithTCGCacheMiB(mib int) Option {
	return func(e *Enforcer) {
		if mib != 0 {
			e.tcgCacheMiB = int64(min(max(mib, MinTCGCacheMiB), MaxTCGCacheMiB))
		}
	}
}

// New returns the Enforcer of driver; a nil log discards its logs.
func New(driver sandbox.Driver, log *slog.Logger, opts ...Option) *Enforcer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Enforcer{driver: driver, log: log, tcgCacheMiB: DefaultTCGCacheMiB}
	for _, o := range opts {
		o(e)
	}
	return e
}

// Resolve resolves sb's limits from opts and the image and checks the
// disk against the image's virtual size (sandbox.Limits).
func (e *Enforcer) Resolve(ctx context.Context, sb *sandbox.Sandbox, opts sandbox.Options) (*sandbox.ResourceLimits, error) {
	if err := CheckRequest(sb.VCPUs, opts.MemoryMiB, opts.Resources); err != nil {
		return nil, err
	}
	if opts.Resources.NetBytesPerSec > 0 && !opts.Network.HasNIC() {
		return nil, fmt.Errorf("%w: a network cap needs a network, and network mode %s gives the sandbox none: add --network allowlist or open, or drop the cap", sandbox.ErrInvalid, netMode(opts))
	}
	_, _, req := Resolve(opts.Image, sb.VCPUs, 0, opts.Resources)
	base, err := overlay.Inspect(ctx, opts.Image.Disk)
	if err != nil {
		return nil, fmt.Errorf("image disk: %w", err)
	}
	baseMiB := int64((base.VirtualSize + 1<<20 - 1) >> 20)
	switch {
	case req.DiskMiB == 0:
		req.DiskMiB = baseMiB
	case uint64(req.DiskMiB)<<20 < base.VirtualSize:
		return nil, fmt.Errorf("%w: disk %d MiB is smaller than the image's disk of %d MiB (%d bytes): ask for at least %d MiB", sandbox.ErrInvalid, req.DiskMiB, baseMiB, base.VirtualSize, baseMiB)
	}
	var tcgCache int64
	if opts.Accel.DomainType == string(domain.TypeQEMU) {
		tcgCache = e.tcgCacheMiB
	}
	return &sandbox.ResourceLimits{
		DiskMiB: req.DiskMiB, CPUQuotaPercent: req.CPUQuotaPercent,
		IOBytesPerSec: req.IOBytesPerSec, IOPS: req.IOPS, IOWeight: req.IOWeight,
		MemoryHardLimitMiB: HardLimitMiB(int64(sb.Memory), tcgCache), Pids: req.Pids,
		NetBytesPerSec: req.NetBytesPerSec, TCGCacheMiB: tcgCache,
	}, nil
}

// warnedLimits holds the limit names already logged as not enforced.
var warnedLimits sync.Map

// memlockFailure matches libvirt's error when it cannot raise the memlock
// rlimit to the hard limit.
func memlockFailure(err error) bool {
	return err != nil && strings.Contains(err.Error(), "cannot limit locked memory")
}

// tune is the domain XML's share of lim (see domain.Tune). The memory
// hard limit goes to libvirt when viaLibvirt (libvirt did not fail to
// apply one through this Enforcer before).
func tune(lim *sandbox.ResourceLimits, typ domain.Type, viaLibvirt bool) domain.Tune {
	t := domain.Tune{
		CPUQuotaPercent: uint(lim.CPUQuotaPercent),
		BlkioWeight:     uint(lim.IOWeight),
		DiskBytesPerSec: uint64(lim.IOBytesPerSec),
		DiskIOPS:        uint64(lim.IOPS),
	}
	if typ == domain.TypeQEMU { // TCG only: KVM has no translation cache (domain.Tune refuses it)
		t.TCGCacheMiB = uint(lim.TCGCacheMiB)
		if t.TCGCacheMiB == 0 { // a record from before the setting
			t.TCGCacheMiB = DefaultTCGCacheMiB
		}
	}
	if viaLibvirt {
		t.MemoryHardLimitMiB = uint64(lim.MemoryHardLimitMiB)
	}
	return t
}

// Start starts the domain of spec with start and the limits of sb's
// record (sandbox.Limits), so every way a domain starts (a create, a
// restore, a warm pool member) records the same enforcement. spec.Tune
// gets the XML's share; a memory hard limit libvirt cannot apply on this
// host is retried without it (and remembered, and spec.Tune loses it),
// and set on the cgroup after the start instead, with pids.max.
func (e *Enforcer) Start(ctx context.Context, sb *sandbox.Sandbox, spec *domain.Spec, start func(context.Context, domain.Spec) error) (*sandbox.ResourceLimits, error) {
	lim := sb.Record().Resources
	if lim == nil {
		return nil, start(ctx, *spec)
	}
	spec.Tune = tune(lim, spec.Type, !e.noLibvirtHardLimit.Load())
	viaLibvirt := spec.Tune.MemoryHardLimitMiB > 0
	err := start(ctx, *spec)
	if viaLibvirt && memlockFailure(err) {
		e.noLibvirtHardLimit.Store(true)
		e.log.Info("libvirt cannot apply <memtune><hard_limit> on this host (libvirtd lacks CAP_SYS_RESOURCE to raise the memlock rlimit); agentbox sets the memory cgroup limit itself",
			"sandbox", sb.ID, "err", err)
		spec.Tune.MemoryHardLimitMiB = 0
		viaLibvirt = false
		err = start(ctx, *spec)
	}
	if err != nil {
		return nil, err
	}
	st := []sandbox.LimitStatus{{Name: sandbox.LimitDisk, Value: lim.DiskMiB, Unit: "MiB", Enforcement: sandbox.EnforcedQEMU, Detail: "qcow2 overlay virtual size"}}
	if lim.CPUQuotaPercent > 0 {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitCPUQuota, Value: int64(lim.CPUQuotaPercent), Unit: "percent", Enforcement: sandbox.EnforcedLibvirt, Detail: "<cputune><global_quota>"})
	}
	if viaLibvirt {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitMemoryHard, Value: lim.MemoryHardLimitMiB, Unit: "MiB", Enforcement: sandbox.EnforcedLibvirt, Detail: "<memtune><hard_limit>"})
	}
	st = append(st, e.limitNet(sb, lim, spec, outLimit(sb))...) // netrate.go: on the tap QEMU now holds
	if lim.IOBytesPerSec > 0 {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitIOBps, Value: lim.IOBytesPerSec, Unit: "bytes/s", Enforcement: sandbox.EnforcedLibvirt, Detail: "<iotune><total_bytes_sec>"})
	}
	if lim.IOPS > 0 {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitIOPS, Value: lim.IOPS, Unit: "ops/s", Enforcement: sandbox.EnforcedLibvirt, Detail: "<iotune><total_iops_sec>"})
	}
	if lim.IOWeight > 0 {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitIOWeight, Value: int64(lim.IOWeight), Unit: "weight", Enforcement: sandbox.EnforcedLibvirt,
			Detail: "<blkiotune><weight> (proportional: takes effect only under an I/O scheduler with weights, BFQ)"})
	}
	if spec.Tune.TCGCacheMiB > 0 {
		st = append(st, sandbox.LimitStatus{Name: sandbox.LimitTCGCacheMiB, Value: int64(spec.Tune.TCGCacheMiB), Unit: "MiB", Enforcement: sandbox.EnforcedLibvirt, Detail: "<features><tcg><tb-cache>"})
	}
	lim.Status = st
	e.apply(ctx, sb, lim, viaLibvirt)
	return lim, nil
}

// apply writes the limits libvirt does not set into the running domain's
// cgroups: the memory limit when libvirt did not (memSet false), and
// pids.max; it appends their status to lim.Status and the groups it made
// to lim.MadeCgroups. A limit that cannot be set is recorded as not
// enforced and logged; it does not fail the start. The groups agentbox
// made are removed once the QEMU process has ended (polled every 2 s, in
// the background).
func (e *Enforcer) apply(ctx context.Context, sb *sandbox.Sandbox, lim *sandbox.ResourceLimits, memSet bool) {
	var st []sandbox.LimitStatus
	notEnforced := func(name string, v int64, unit string, err error) sandbox.LimitStatus {
		if _, seen := warnedLimits.LoadOrStore(name, true); !seen {
			e.log.Warn("resource limit not enforced on this host (warned once per limit; inspect shows it per sandbox)", "sandbox", sb.ID, "limit", name, "value", v, "err", err)
		}
		return sandbox.LimitStatus{Name: name, Value: v, Unit: unit, Enforcement: sandbox.NotEnforced + ": " + err.Error()}
	}
	var g *cgroup.Group
	ud, ok := e.driver.(sandbox.UsageDriver)
	var err error
	if !ok {
		err = errors.New("the driver cannot report the QEMU process id")
	} else {
		var pid int
		if pid, err = ud.DomainPID(ctx, sb.Domain); err == nil {
			g, err = cgroup.Of(pid, cgroup.Options{})
		}
	}
	if !memSet {
		if err == nil {
			var file string
			if file, err = g.SetMemoryMax(lim.MemoryHardLimitMiB << 20); err == nil {
				st = append(st, sandbox.LimitStatus{Name: sandbox.LimitMemoryHard, Value: lim.MemoryHardLimitMiB, Unit: "MiB", Enforcement: sandbox.EnforcedCgroup, Detail: file})
			}
		}
		if err != nil {
			st = append(st, notEnforced(sandbox.LimitMemoryHard, lim.MemoryHardLimitMiB, "MiB", err))
		}
	}
	if g != nil {
		if file, perr := g.SetPidsMax(lim.Pids); perr == nil {
			st = append(st, sandbox.LimitStatus{Name: sandbox.LimitPids, Value: lim.Pids, Unit: "tasks", Enforcement: sandbox.EnforcedCgroup, Detail: file})
		} else {
			st = append(st, notEnforced(sandbox.LimitPids, lim.Pids, "tasks", perr))
		}
		if made := g.Made(); len(made) > 0 {
			lim.MadeCgroups = made
			go e.removeWhenEmpty(sb.ID, made, func() bool { return sb.State().Final() }, removePoll)
		}
	} else {
		st = append(st, notEnforced(sandbox.LimitPids, lim.Pids, "tasks", err))
	}
	lim.Status = append(lim.Status, st...)
}

// removePoll is how often removeWhenEmpty tries.
const removePoll = 2 * time.Second

// removeWhenEmpty deletes dirs, the groups agentbox made for one domain
// of sandbox id, once its QEMU process has left them (rmdir fails with
// EBUSY until then), trying every poll; once final reports the sandbox
// final it tries one last time and logs a failure. It removes only the groups it was given: the
// record may list those of the sandbox's next domain by then (a start,
// or a resume from disk, right after a stop or pause to disk), which a
// removal would hit while their QEMU runs. Release does it at once after
// a destroy.
func (e *Enforcer) removeWhenEmpty(id string, dirs []string, final func() bool, poll time.Duration) {
	for {
		time.Sleep(poll)
		err := removeDirs(dirs)
		if err == nil {
			return
		}
		if final() {
			e.log.Warn("cgroup of a stopped sandbox not removed", "sandbox", id, "err", err)
			return
		}
	}
}

// Release removes the cgroups agentbox made for sb's domain (listed in
// its record), after the domain ended (sandbox.Limits).
func (e *Enforcer) Release(sb *sandbox.Sandbox) {
	r := sb.Record().Resources
	if r == nil || len(r.MadeCgroups) == 0 {
		return
	}
	if err := removeDirs(r.MadeCgroups); err != nil {
		e.log.Warn("cgroup of a stopped sandbox not removed", "sandbox", sb.ID, "err", err)
	}
}

// Reconciling removes the pids cgroups agentbox made for domains that
// are gone (cgroup.RemoveLeftovers): a domain that ended while no daemon
// watched it (the daemon was down or killed, an in-process run was
// killed) leaves its group behind, which neither removeWhenEmpty nor
// Release will ever see. Only groups of agentbox's domains (named
// sandbox.DomainPrefix…) that the driver does not list as running go;
// each is reported in rep.Cleaned as "cgroup DIR". Failures are logged.
// A driver that is no sandbox.UsageDriver (a fake one) never had groups
// made, and its list says nothing of the host's domains: nothing is
// touched then. It is a sandbox.Hooks Reconciling hook.
func (e *Enforcer) Reconciling(ctx context.Context, _ map[string]bool, rep *sandbox.Report) {
	if _, ok := e.driver.(sandbox.UsageDriver); !ok {
		return
	}
	removed, err := cgroup.RemoveLeftovers(e.cgroups,
		func(name string) bool { return strings.HasPrefix(name, sandbox.DomainPrefix) },
		func() (map[string]bool, error) {
			doms, err := e.driver.ListDomains(ctx)
			running := map[string]bool{}
			for _, d := range doms {
				running[d.Name] = d.Running
			}
			return running, err
		})
	for _, dir := range removed {
		rep.Cleaned = append(rep.Cleaned, "cgroup "+dir)
	}
	if len(removed) > 0 {
		e.log.Info("removed the cgroups of domains that ended while no daemon watched them", "groups", removed)
	}
	if err != nil {
		e.log.Warn("cgroups of ended domains not removed", "err", err)
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
	// Memory splits the QEMU process's memory into what is its own and
	// what it shares (memory.go); nil when its smaps_rollup could not be
	// read.
	Memory *MemoryUsage `json:"memory,omitempty"`
}

// Usage samples the running sandbox's resource use from the driver's
// statistics and the QEMU process's cgroups. Errors: sandbox.ErrNotRunning,
// the driver has no statistics (sandbox.ErrInvalid), the hypervisor's
// errors.
func (e *Enforcer) Usage(ctx context.Context, sb *sandbox.Sandbox) (Usage, error) {
	if sb.State() != sandbox.StateRunning {
		return Usage{}, sb.NotRunning()
	}
	ud, ok := e.driver.(sandbox.UsageDriver)
	if !ok {
		return Usage{}, fmt.Errorf("%w: the driver reports no usage", sandbox.ErrInvalid)
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
			if s.Name == sandbox.LimitMemoryHard && s.Enforced() {
				u.MemoryLimitBytes = uint64(s.Value) << 20
			}
		}
	}
	if pid, err := ud.DomainPID(ctx, sb.Domain); err == nil {
		if g, err := cgroup.Of(pid, cgroup.Options{}); err == nil {
			cs := g.Stats()
			u.Pids, u.PidsMax = cs.Pids, cs.PidsMax
			u.Memory = memoryUsage(pid, cs)
		} else {
			u.Memory = memoryUsage(pid, cgroup.Stats{MemoryBytes: -1, MemoryAnonBytes: -1, MemoryFileBytes: -1})
		}
	}
	return u, nil
}
