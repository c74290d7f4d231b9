package resources

import (
	"github.com/agentbox/agentbox/vmctl/cgroup"
	"github.com/agentbox/agentbox/vmctl/memstat"
)

// MemoryUsage is a running sandbox's host memory split into what only it
// holds and what it shares with other processes, read from its QEMU
// process's /proc/PID/smaps_rollup (vmctl/memstat) and its domain's
// memory cgroup, or nil when its smaps_rollup cannot be read. All figures are bytes. A booted sandbox's guest RAM is
// anonymous and private; a clone of a memory template maps the template's
// RAM file privately (copy-on-write), so the guest pages it has only read
// are page cache shared with the template's other clones (SharedBytes,
// counted in each clone's RSS but split between them in PSS), and the
// pages it wrote are anonymous (AnonBytes).
type MemoryUsage struct {
	// PSSBytes is the proportional set size: every resident page divided
	// by the number of processes mapping it. Summed over sandboxes it is
	// what they hold together; it is the figure to compare sandboxes by.
	PSSBytes uint64 `json:"pss_bytes"`
	// PrivateBytes is resident memory no other process maps
	// (Private_Clean + Private_Dirty): freed when the sandbox ends.
	PrivateBytes uint64 `json:"private_bytes"`
	// SharedBytes is resident memory other processes map too
	// (Shared_Clean + Shared_Dirty): a clone's template RAM pages that
	// another clone has also read, QEMU's code. PrivateBytes +
	// SharedBytes is the RSS.
	SharedBytes uint64 `json:"shared_bytes"`
	// AnonBytes is resident memory backed by no file (Anonymous): QEMU's
	// heap and TCG translation cache, a booted guest's RAM, the pages a
	// clone copied on write.
	AnonBytes uint64 `json:"anon_bytes"`
	// CgroupBytes is what the kernel charges to the domain's memory
	// cgroup (memory.current on v2, memory.usage_in_bytes on v1), the
	// figure its hard limit applies to; CgroupAnonBytes and
	// CgroupFileBytes split it into anonymous memory and page cache. Page
	// cache is charged to the group that first faulted it in, so a
	// clone's shared template pages are usually charged elsewhere (see
	// vmctl/sandbox/RESOURCES.md). -1 when unknown (no memory cgroup).
	CgroupBytes     int64 `json:"cgroup_bytes"`
	CgroupAnonBytes int64 `json:"cgroup_anon_bytes"`
	CgroupFileBytes int64 `json:"cgroup_file_bytes"`
}

// memoryUsage reads process pid's smaps_rollup and takes the cgroup
// figures from cs; nil when the rollup cannot be read.
func memoryUsage(pid int, cs cgroup.Stats) *MemoryUsage {
	r, err := memstat.Read("", pid)
	if err != nil {
		return nil
	}
	return memoryFrom(r, cs)
}

// memoryFrom is the MemoryUsage of a rollup and cgroup statistics.
func memoryFrom(r memstat.Rollup, cs cgroup.Stats) *MemoryUsage {
	return &MemoryUsage{
		PSSBytes: r.Pss, PrivateBytes: r.Private(), SharedBytes: r.Shared(), AnonBytes: r.Anonymous,
		CgroupBytes: cs.MemoryBytes, CgroupAnonBytes: cs.MemoryAnonBytes, CgroupFileBytes: cs.MemoryFileBytes,
	}
}
