package sandbox

import (
	"fmt"
	"os"
	"syscall"
)

// SharedMemory is guest RAM a sandbox maps from a memory template's RAM
// file instead of holding it: a clone maps the file privately
// (copy-on-write), so the pages it only reads stay page cache shared with
// the template's other clones, and only the pages it writes become its
// own. Admission control counts such memory once per template (see
// Resources); vmctl/sandbox/RESOURCES.md says how the kernel charges it.
// The clone path sets it (Shape.SharedMemory); it is kept in the record.
type SharedMemory struct {
	// Template identifies the RAM file (the memory template's key or
	// version): the clones of one template share it, those of another
	// template do not.
	Template string `json:"template"`
	// MiB is how much of the sandbox's guest RAM, in MiB, it is expected
	// to keep sharing: the template's guest RAM in its RAM file (the
	// pages the template had touched, the file's allocated size). At
	// most the sandbox's guest RAM (larger values count as that).
	MiB int `json:"mib"`
}

// clone returns a copy of s (nil for nil).
func (s *SharedMemory) clone() *SharedMemory {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// sharedMiB is how much of sb's guest RAM admission counts once per
// template rather than per sandbox: SharedMemory.MiB within 0..Memory.
func (sb *Sandbox) sharedMiB() int {
	if sb.Shared == nil || sb.Shared.Template == "" {
		return 0
	}
	return min(max(sb.Shared.MiB, 0), sb.Memory)
}

// memoryCommit sums the guest RAM the given sandboxes commit, in MiB:
// each one's private part (its guest RAM minus its shared part) plus,
// once per template, the largest shared part among its clones.
func memoryCommit(sbs []*Sandbox) int {
	total, shared := 0, map[string]int{}
	for _, sb := range sbs {
		s := sb.sharedMiB()
		total += sb.Memory - s
		if s > 0 {
			shared[sb.Shared.Template] = max(shared[sb.Shared.Template], s)
		}
	}
	for _, s := range shared {
		total += s
	}
	return total
}

// requestLocked is what admission is asked about a new (or resuming)
// sandbox sb: what the other live sandboxes hold, sb's vCPUs and guest
// RAM, and the part of that RAM already counted as another live clone's
// shared template memory (SharedMiB). m.mu is held.
func (m *Manager) requestLocked(sb *Sandbox) Resources {
	r := m.resourcesLocked()
	r.VCPUs, r.MemoryMiB = sb.VCPUs, sb.Memory
	if s := sb.sharedMiB(); s > 0 {
		for _, o := range m.byID {
			if o != sb && o.holdsResources() && o.sharedMiB() > 0 && o.Shared.Template == sb.Shared.Template {
				r.SharedMiB = max(r.SharedMiB, min(s, o.sharedMiB()))
			}
		}
	}
	return r
}

// unshare forgets sb's SharedMemory before its domain comes back without
// the template mapping: a start after a stop and a resume from disk run
// the recorded spec with private RAM (rebuild, domain.MemoryBackend.
// Private), so from then on the sandbox holds its whole guest RAM and
// admission (reserve, called after this) and its record count all of
// it. The record is saved when it changed. Takes m.mu, then sb.mu: the
// readers of sb.Shared hold m.mu.
func (m *Manager) unshare(sb *Sandbox) {
	m.mu.Lock()
	sb.mu.Lock()
	had := sb.Shared != nil || sb.rec.SharedMemory != nil
	sb.Shared, sb.rec.SharedMemory = nil, nil
	sb.mu.Unlock()
	m.mu.Unlock()
	if had {
		sb.persist()
	}
}

// SharedMemoryOf is the SharedMemory of a clone that maps the memory
// template RAM file ramFile: the file's path as the template's identity
// (a rebuilt template writes a new file) and its allocated size — the
// guest RAM the template touched; the rest of a sparse RAM file is holes
// — in MiB, rounded down. Errors: the file cannot be stat'ed.
func SharedMemoryOf(ramFile string) (*SharedMemory, error) {
	fi, err := os.Stat(ramFile)
	if err != nil {
		return nil, fmt.Errorf("memory template RAM file: %w", err)
	}
	alloc := fi.Size()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		alloc = min(alloc, st.Blocks*512) // st_blocks counts 512-byte units
	}
	return &SharedMemory{Template: ramFile, MiB: int(alloc >> 20)}, nil
}
