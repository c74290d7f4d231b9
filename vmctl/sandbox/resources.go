package sandbox

import (
	"context"
	"strings"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// How a limit is enforced: the values of LimitStatus.Enforcement (the
// not-enforced case is NotEnforced + ": " + why).
const (
	EnforcedLibvirt = "libvirt"  // domain XML: libvirt writes the cgroup or QEMU throttles
	EnforcedCgroup  = "cgroup"   // agentbox wrote the domain's cgroup file itself
	EnforcedQEMU    = "qemu"     // the virtual disk's size: the guest cannot address more
	EnforcedTC      = "tc"       // agentbox set traffic control on the sandbox's tap (netlink)
	EnforcedNft     = "nftables" // the sandbox's own firewall rules (vmctl/network)
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
	LimitNetRate     = "net_rate"     // to the guest
	LimitNetRateOut  = "net_rate_out" // from the guest
)

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
	// NetBytesPerSec caps the network traffic in each direction (to the
	// guest: traffic control on the host's tap, vmctl/network.LimitTap;
	// from the guest: the sandbox's firewall rules,
	// vmctl/network.OutLimit), at least
	// resources.MinNetBytesPerSec; it needs a policy with a NIC. 0: none.
	NetBytesPerSec int64
}

// LimitStatus says whether and how one limit is in force.
type LimitStatus struct {
	// Name is one of the Limit* constants.
	Name string `json:"name"`
	// Value and Unit give the limit ("MiB", "percent", "bytes/s",
	// "ops/s", "weight", "tasks").
	Value int64  `json:"value"`
	Unit  string `json:"unit"`
	// Enforcement is EnforcedLibvirt, EnforcedCgroup, EnforcedQEMU,
	// EnforcedTC, EnforcedNft or "not enforced: <why>".
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
	// NetBytesPerSec is the network cap in each direction, bytes/s; 0
	// means none.
	NetBytesPerSec int64 `json:"net_bps,omitempty"`
	// TCGCacheMiB is the TCG translation cache of a TCG domain, in MiB
	// (<features><tcg><tb-cache>; counted in MemoryHardLimitMiB); 0 for
	// KVM, and in records from before it was a setting (their TCG domains
	// get resources.DefaultTCGCacheMiB).
	TCGCacheMiB int64 `json:"tcg_cache_mib,omitempty"`
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
// enforcement records and cgroups (Limits.Start records
// the restored domain's own). nil for nil.
func (r *ResourceLimits) forRestore() *ResourceLimits {
	c := r.clone()
	if c != nil {
		c.Status, c.MadeCgroups = nil, nil
	}
	return c
}

// Limits resolves a create's resource request into a sandbox's
// host-side limits and puts them in force around its domain's start.
// vmctl/sandbox/resources.Enforcer implements it (Config.Limits).
type Limits interface {
	// Resolve applies the image's defaults to opts' request and checks it
	// for sb (its resolved VCPUs and Memory), before anything is made.
	// Errors wrap ErrInvalid and say what to ask for.
	Resolve(ctx context.Context, sb *Sandbox, opts Options) (*ResourceLimits, error)
	// Start puts the limits of sb's record into spec.Tune (the domain
	// XML's share), starts the domain with start, and sets the limits the
	// XML cannot on the running domain (cgroups). It returns the limits
	// with how each is enforced (Status) and the cgroups it made, or nil
	// when sb's record has no limits. On error no domain is left.
	Start(ctx context.Context, sb *Sandbox, spec *domain.Spec, start func(context.Context, domain.Spec) error) (*ResourceLimits, error)
	// Release removes what Start made for sb's domain (its cgroups, listed
	// in the record) once the domain is gone.
	Release(sb *Sandbox)
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
