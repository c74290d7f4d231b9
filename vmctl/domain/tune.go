package domain

import (
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// Limits of the [Tune] fields, checked by [Spec.Validate].
const (
	// CPUPeriodUs is the CFS period, in microseconds, written as
	// <cputune><global_period>: the whole-VM quota is a share of it.
	CPUPeriodUs = 100000
	// MaxCPUQuotaPercent is the largest accepted [Tune.CPUQuotaPercent]:
	// [MaxVCPUs] host CPUs.
	MaxCPUQuotaPercent = MaxVCPUs * 100
	// MinBlkioWeight and MaxBlkioWeight bound [Tune.BlkioWeight]; libvirt
	// accepts 100..1000 on cgroup v1 and maps it onto io.weight on v2
	// (https://libvirt.org/formatdomain.html#block-i-o-tuning).
	MinBlkioWeight = 100
	MaxBlkioWeight = 1000
)

// Tune holds the host-side resource limits libvirt applies to the
// domain's cgroups and block layer. Every field is optional: zero leaves
// the limit out of the XML. Elements and units follow
// https://libvirt.org/formatdomain.html (CPU tuning, memory tuning, block
// I/O tuning, disk <iotune>).
type Tune struct {
	// CPUQuotaPercent caps the whole VM (every vCPU, emulator and I/O
	// thread together) at this percentage of one host CPU: 50 is half a
	// CPU, 200 two CPUs. Written as <cputune><global_period> 100000 µs
	// and <global_quota> percent × 1000 µs. (Plain <period>/<quota>
	// would apply per vCPU.) 1..[MaxCPUQuotaPercent].
	CPUQuotaPercent uint
	// MemoryHardLimitMiB is the most memory the QEMU process may use
	// (guest RAM plus QEMU's own), in MiB, written as
	// <memtune><hard_limit>. libvirt then also raises the process's
	// memlock rlimit to it, which fails on hosts where libvirtd lacks
	// CAP_SYS_RESOURCE; callers set the cgroup limit themselves there and
	// leave this 0. When set it must be above Spec.MemoryMiB.
	MemoryHardLimitMiB uint64
	// BlkioWeight is the domain's relative share of block I/O,
	// <blkiotune><weight>, [MinBlkioWeight]..[MaxBlkioWeight].
	BlkioWeight uint
	// DiskBytesPerSec and DiskIOPS throttle the root disk in QEMU's block
	// layer: <iotune><total_bytes_sec> (bytes per second, reads and
	// writes together) and <total_iops_sec> (requests per second).
	DiskBytesPerSec uint64
	DiskIOPS        uint64
	// TCGCacheMiB sets the size of QEMU's TCG translation cache,
	// <features><tcg><tb-cache> (MiB); only for [TypeQEMU]. QEMU's
	// default is 1 GiB (or 1/8 of host RAM if less), which counts toward
	// the process's memory once filled; a memory hard limit needs it
	// bounded.
	TCGCacheMiB uint
}

// validate returns one error per bad field of t in s.
func (t Tune) validate(s Spec) []error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fieldError{field: "Tune." + field, msg: fmt.Sprintf(format, args...)})
	}
	if t.CPUQuotaPercent > MaxCPUQuotaPercent {
		bad("CPUQuotaPercent", "%d%% is out of range; use 1 to %d (percent of one host CPU) or 0 for no cap", t.CPUQuotaPercent, MaxCPUQuotaPercent)
	}
	if t.MemoryHardLimitMiB != 0 && t.MemoryHardLimitMiB <= s.MemoryMiB {
		bad("MemoryHardLimitMiB", "%d MiB is not above the guest memory of %d MiB; QEMU needs room for itself, use 0 or more", t.MemoryHardLimitMiB, s.MemoryMiB)
	}
	if t.BlkioWeight != 0 && (t.BlkioWeight < MinBlkioWeight || t.BlkioWeight > MaxBlkioWeight) {
		bad("BlkioWeight", "%d is out of range; use %d to %d or 0 for the default", t.BlkioWeight, MinBlkioWeight, MaxBlkioWeight)
	}
	if t.TCGCacheMiB != 0 && s.Type != TypeQEMU {
		bad("TCGCacheMiB", "applies to TCG (type %q) only; leave it 0 for %q", TypeQEMU, s.Type)
	}
	return errs
}

// apply writes t into the domain d built from a valid Spec.
func (t Tune) apply(d *libvirtxml.Domain) {
	if t.CPUQuotaPercent > 0 {
		period := uint64(CPUPeriodUs)
		d.CPUTune = &libvirtxml.DomainCPUTune{
			GlobalPeriod: &libvirtxml.DomainCPUTunePeriod{Value: period},
			GlobalQuota:  &libvirtxml.DomainCPUTuneQuota{Value: int64(t.CPUQuotaPercent) * CPUPeriodUs / 100},
		}
	}
	if t.MemoryHardLimitMiB > 0 {
		d.MemoryTune = &libvirtxml.DomainMemoryTune{
			HardLimit: &libvirtxml.DomainMemoryTuneLimit{Value: t.MemoryHardLimitMiB, Unit: "MiB"},
		}
	}
	if t.BlkioWeight > 0 {
		d.BlockIOTune = &libvirtxml.DomainBlockIOTune{Weight: t.BlkioWeight}
	}
	if t.DiskBytesPerSec > 0 || t.DiskIOPS > 0 {
		for i := range d.Devices.Disks {
			d.Devices.Disks[i].IOTune = &libvirtxml.DomainDiskIOTune{TotalBytesSec: t.DiskBytesPerSec, TotalIopsSec: t.DiskIOPS}
		}
	}
	if t.TCGCacheMiB > 0 {
		d.Features.TCG = &libvirtxml.DomainFeatureTCG{TBCache: &libvirtxml.DomainFeatureTCGTBCache{Unit: "MiB", Size: t.TCGCacheMiB}}
	}
}
