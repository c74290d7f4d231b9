package api

import "time"

// EventSandboxResource is the event of a usage threshold crossed or a
// domain found paused: Reason names the limit and the numbers, and says
// whether the sandbox is being stopped.
const EventSandboxResource = "sandbox.resource"

// Resources are a sandbox's host-side limits (see CreateSandboxRequest)
// as resolved from the request, the image's defaults and agentbox's, with
// how each one is enforced.
type Resources struct {
	// DiskMiB is the root disk's virtual size in MiB.
	DiskMiB int64 `json:"disk_mib"`
	// CPUQuotaPercent is the whole-VM CPU cap in percent of one host CPU;
	// 0: none.
	CPUQuotaPercent int `json:"cpu_quota_percent,omitempty"`
	// MemoryHardLimitMiB is the QEMU process's memory limit in MiB: 8/5 of
	// (guest RAM + 160 MiB for QEMU itself + 256 MiB of TCG translation
	// cache under TCG), rounded up; see vmctl/sandbox MemoryHardLimitMiB.
	MemoryHardLimitMiB int64 `json:"memory_hard_limit_mib"`
	// IOBps, IOPS and IOWeight: see CreateSandboxRequest; 0: none.
	IOBps int64 `json:"io_bps,omitempty"`
	// NetBps is the network cap in bytes/s, each direction; 0: none.
	NetBps   int64 `json:"net_bps,omitempty"`
	IOPS     int64 `json:"iops,omitempty"`
	IOWeight int   `json:"io_weight,omitempty"`
	// Pids is the QEMU process's task limit.
	Pids int64 `json:"pids"`
	// Enforcement lists every limit with how it is enforced.
	Enforcement []LimitEnforcement `json:"enforcement"`
}

// LimitEnforcement says whether and how one limit is in force.
type LimitEnforcement struct {
	// Limit is "disk", "cpu_quota", "memory_hard_limit", "io_bps",
	// "iops", "io_weight", "pids" or "tcg_cache".
	Limit string `json:"limit"`
	// Value and Unit give the limit ("MiB", "percent", "bytes/s",
	// "ops/s", "weight", "tasks").
	Value int64  `json:"value"`
	Unit  string `json:"unit"`
	// Enforcement is "libvirt" (domain XML), "cgroup" (agentbox wrote the
	// domain's cgroup file), "qemu" (the virtual disk's size), or
	// "not enforced: <why>".
	Enforcement string `json:"enforcement"`
	// Detail names the XML element or the cgroup file.
	Detail string `json:"detail,omitempty"`
}

// Usage is one sample of a running sandbox's resource use, read every
// few seconds by the daemon from libvirt's domain statistics and the QEMU
// process's cgroups.
type Usage struct {
	// SampledAt is when it was read.
	SampledAt time.Time `json:"sampled_at"`
	// DomainState is libvirt's state of the domain ("running", "paused");
	// PauseReason says why it is paused, e.g. "ioerror" (QEMU stopped the
	// guest on a host write error such as ENOSPC).
	DomainState string `json:"domain_state"`
	PauseReason string `json:"pause_reason,omitempty"`
	// CPUTimeNs is the QEMU process's CPU time in nanoseconds.
	CPUTimeNs uint64 `json:"cpu_time_ns"`
	// MemoryRSSBytes is the QEMU process's resident memory in bytes;
	// MemoryLimitBytes its enforced hard limit (0: none).
	MemoryRSSBytes   uint64 `json:"memory_rss_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	// DiskBytes is the host space the sandbox's overlay occupies;
	// DiskCapBytes the disk's virtual size.
	DiskBytes    uint64 `json:"disk_bytes"`
	DiskCapBytes uint64 `json:"disk_cap_bytes"`
	// NetRxBytes and NetTxBytes are the guest's network bytes received
	// and sent (0 without a network).
	NetRxBytes uint64 `json:"net_rx_bytes"`
	NetTxBytes uint64 `json:"net_tx_bytes"`
	// Pids and PidsMax are the QEMU process's host tasks and their limit;
	// -1 when unknown.
	Pids    int64 `json:"pids"`
	PidsMax int64 `json:"pids_max"`
	// Memory splits the QEMU process's memory into what only this
	// sandbox holds and what it shares with other processes (a memory
	// template's clones share the template's guest RAM pages they have
	// not written); absent when it could not be read.
	Memory *MemoryUsage `json:"memory,omitempty"`
}

// MemoryUsage is a sandbox's host memory from its QEMU process's
// /proc/PID/smaps_rollup and its memory cgroup; every figure is in bytes.
// PrivateBytes + SharedBytes is the resident memory (MemoryRSSBytes, read
// at nearly the same time).
type MemoryUsage struct {
	// PSSBytes is the proportional set size: each resident page divided
	// by the number of processes mapping it; summed over sandboxes, what
	// they hold together.
	PSSBytes uint64 `json:"pss_bytes"`
	// PrivateBytes is resident memory no other process maps, freed with
	// the sandbox.
	PrivateBytes uint64 `json:"private_bytes"`
	// SharedBytes is resident memory other processes map too: a clone's
	// template RAM pages another clone also read, QEMU's code.
	SharedBytes uint64 `json:"shared_bytes"`
	// AnonBytes is resident memory backed by no file: QEMU's heap and
	// TCG translation cache, a booted guest's RAM, a clone's pages copied
	// on write.
	AnonBytes uint64 `json:"anon_bytes"`
	// CgroupBytes is what the kernel charges to the domain's memory
	// cgroup (the figure its hard limit applies to), CgroupAnonBytes and
	// CgroupFileBytes its anonymous and page-cache parts; page cache is
	// charged to the group that first faulted it in. -1 when unknown.
	CgroupBytes     int64 `json:"cgroup_bytes"`
	CgroupAnonBytes int64 `json:"cgroup_anon_bytes"`
	CgroupFileBytes int64 `json:"cgroup_file_bytes"`
}
