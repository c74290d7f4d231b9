// Package memstat reads how much host memory a process holds and how
// much of it is its own: /proc/PID/smaps_rollup, the kernel's sum of
// every mapping's page counts (see proc(5) and
// https://docs.kernel.org/filesystems/proc.html, "smaps").
//
// The figures that matter for a sandbox's QEMU process:
//
//   - Rss: every resident page it maps, shared or not; summed over
//     processes it counts shared pages once per process.
//   - Pss: each resident page divided by the number of processes mapping
//     it; summed over processes it is their real total.
//   - Private (Private_Clean + Private_Dirty): pages no other process
//     maps; freed when the process ends.
//   - Shared (Shared_Clean + Shared_Dirty): pages another process maps
//     too, e.g. the guest RAM file of a memory template that several
//     clones map privately (copy-on-write) and have not written, or
//     QEMU's own code.
//   - Anonymous: pages backed by no file: QEMU's heap, the TCG
//     translation cache, guest RAM of a booted guest, and a clone's
//     guest pages it wrote (copied on write from the RAM file).
//
// "Shared" is about mappings, not about who paid: a page-cache page of a
// template's RAM file that only one clone has touched so far is Private
// for smaps although it stays in the page cache (and is charged to the
// memory cgroup that first faulted it) after the clone ends. RESOURCES.md
// in vmctl/sandbox says how agentbox charges and admits such memory.
package memstat

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Rollup is a process's memory from /proc/PID/smaps_rollup, in bytes
// (the kernel reports kB, i.e. KiB; each is multiplied by 1024).
type Rollup struct {
	// Rss is every resident page the process maps.
	Rss uint64
	// Pss is its proportional share: each resident page divided by the
	// number of processes mapping it.
	Pss uint64
	// PssAnon, PssFile and PssShmem split Pss by backing (Linux ≥ 5.10;
	// 0 on older kernels).
	PssAnon, PssFile, PssShmem uint64
	// SharedClean and SharedDirty are resident pages other processes map
	// too; PrivateClean and PrivateDirty those only this process maps.
	SharedClean, SharedDirty, PrivateClean, PrivateDirty uint64
	// Anonymous is resident memory backed by no file.
	Anonymous uint64
	// Swap is anonymous memory swapped out.
	Swap uint64
}

// Private is the memory only this process maps (Private_Clean +
// Private_Dirty), in bytes.
func (r Rollup) Private() uint64 { return r.PrivateClean + r.PrivateDirty }

// Shared is the resident memory other processes map too (Shared_Clean +
// Shared_Dirty), in bytes.
func (r Rollup) Shared() uint64 { return r.SharedClean + r.SharedDirty }

// ParseRollup reads the text of /proc/PID/smaps_rollup (a header line,
// then "Name:   N kB" lines). Unknown fields are ignored; a known field
// that is not "N kB" is an error, and so is text without Rss and Pss.
func ParseRollup(r io.Reader) (Rollup, error) {
	var out Rollup
	fields := map[string]*uint64{
		"Rss": &out.Rss, "Pss": &out.Pss, "Pss_Anon": &out.PssAnon, "Pss_File": &out.PssFile, "Pss_Shmem": &out.PssShmem,
		"Shared_Clean": &out.SharedClean, "Shared_Dirty": &out.SharedDirty,
		"Private_Clean": &out.PrivateClean, "Private_Dirty": &out.PrivateDirty,
		"Anonymous": &out.Anonymous, "Swap": &out.Swap,
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		p := fields[name]
		if p == nil {
			continue // the header line (no colon before the address range's end), or a field we do not use
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return Rollup{}, fmt.Errorf("smaps_rollup: field %s: want \"N kB\", got %q", name, strings.TrimSpace(rest))
		}
		kib, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil || kib > 1<<53 {
			return Rollup{}, fmt.Errorf("smaps_rollup: field %s: bad number %q", name, f[0])
		}
		*p = kib << 10
		seen[name] = true
	}
	if err := sc.Err(); err != nil {
		return Rollup{}, fmt.Errorf("smaps_rollup: %w", err)
	}
	if !seen["Rss"] || !seen["Pss"] {
		return Rollup{}, fmt.Errorf("smaps_rollup: no Rss or Pss line (not a smaps_rollup file?)")
	}
	return out, nil
}

// Read returns the Rollup of process pid from proc, the proc file system
// ("" for /proc). Errors: the process does not exist (wraps
// fs.ErrNotExist), the file cannot be read (smaps_rollup needs Linux ≥
// 4.14 and ptrace read access to the process, i.e. root for QEMU) or
// parsed.
func Read(proc string, pid int) (Rollup, error) {
	if proc == "" {
		proc = "/proc"
	}
	f, err := os.Open(filepath.Join(proc, strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return Rollup{}, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	defer f.Close()
	r, err := ParseRollup(f)
	if err != nil {
		return Rollup{}, fmt.Errorf("memory of process %d: %w", pid, err)
	}
	return r, nil
}
