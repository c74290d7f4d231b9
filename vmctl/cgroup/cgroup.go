// Package cgroup finds the control groups of a running process (a
// domain's QEMU) from /proc/PID/cgroup, writes limits into them and reads
// their usage. It knows both layouts of Linux control groups:
//
//   - cgroup v1 (and the "hybrid" layout: v1 controllers plus an empty
//     unified hierarchy): one hierarchy per controller, mounted at
//     ROOT/<controller> (memory.limit_in_bytes, pids.max, …);
//   - cgroup v2 (unified): one hierarchy at ROOT with every enabled
//     controller (memory.max, pids.max, …).
//
// See https://docs.kernel.org/admin-guide/cgroup-v1/ and
// https://docs.kernel.org/admin-guide/cgroup-v2.html for the files.
//
// libvirt puts each domain into its own group (v1 without systemd:
// /machine/qemu-ID-NAME.libvirt-qemu with the QEMU main thread in an
// "emulator" child for cpu and cpuset; with systemd:
// /machine.slice/machine-qemu….scope, on v2 with a "libvirt" child).
// The domain's group is the one above those per-thread children. libvirt
// leaves the pids controller out (it has no element for it): on v1 [Group]
// then makes the domain's group in the pids hierarchy itself and moves the
// process in ([Group.SetPidsMax]).
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// DefaultRoot is where the cgroup file systems are mounted.
const DefaultRoot = "/sys/fs/cgroup"

// ErrUnsupported is wrapped when a controller is not available for the
// process (not mounted, or on v2 not enabled for its group).
var ErrUnsupported = errdefs.New(errdefs.ErrFailedPrecondition, "", "cgroup controller not available")

// Options tunes [Of].
type Options struct {
	// Root is the cgroup mount root; default [DefaultRoot].
	Root string
	// Proc is the proc file system; default "/proc".
	Proc string
	// Unified forces the layout: nil detects it (v2 when Root itself is
	// a cgroup2 mount), else true for v2 and false for v1/hybrid. Tests
	// use it with a fake Root.
	Unified *bool
}

// Group is the domain-level control group of one process.
type Group struct {
	pid     int
	root    string
	unified bool
	// paths maps a v1 controller name to the process's path in its
	// hierarchy; the key "" holds the unified (v2) path.
	paths map[string]string
	// made lists the directories SetPidsMax created (v1), for Remove.
	made []string
}

// Of reads /proc/PID/cgroup and returns the process's domain-level group.
// Errors: the process does not exist (wraps fs.ErrNotExist), the file
// cannot be parsed.
func Of(pid int, opts Options) (*Group, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if opts.Proc == "" {
		opts.Proc = "/proc"
	}
	f, err := os.Open(filepath.Join(opts.Proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("cgroups of process %d: %w", pid, err)
	}
	defer f.Close()
	paths, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("cgroups of process %d: %w", pid, err)
	}
	return &Group{pid: pid, root: opts.Root, unified: opts.unified(), paths: paths}, nil
}

// unified reports the layout at o.Root: o.Unified if set, else whether
// Root itself is a cgroup2 mount.
func (o Options) unified() bool {
	if o.Unified != nil {
		return *o.Unified
	}
	var st unix.Statfs_t
	return unix.Statfs(o.Root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// Parse reads the lines of /proc/PID/cgroup ("ID:CONTROLLERS:PATH", see
// cgroups(7)) into a map from each controller name ("memory", "pids",
// "name=systemd", …) to the path in its hierarchy; the unified hierarchy's
// line ("0::PATH") is under the key "".
func Parse(r io.Reader) (map[string]string, error) {
	out := map[string]string{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			return nil, fmt.Errorf("malformed cgroup line %q", line)
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

// threadDir matches the per-thread children libvirt makes inside a
// domain's group.
var threadDir = regexp.MustCompile(`^(emulator|vcpu[0-9]+|iothread[0-9]+)$`)

// DomainPath strips libvirt's per-thread child (emulator, vcpuN,
// iothreadN) from a cgroup path: the group that holds the whole domain.
func DomainPath(p string) string {
	if threadDir.MatchString(path.Base(p)) {
		return path.Dir(p)
	}
	return p
}

// Unified reports whether the process's groups are in a v2 hierarchy.
func (g *Group) Unified() bool { return g.unified }

// domain returns the domain-level path of the process for controller c
// ("" for the unified hierarchy on v2).
func (g *Group) domain(c string) (string, bool) {
	if g.unified {
		p, ok := g.paths[""]
		return DomainPath(p), ok
	}
	p, ok := g.paths[c]
	return DomainPath(p), ok
}

// Dir returns the host directory of the process's domain-level group for
// controller c ("memory", "pids", "cpu", "blkio"/"io"), or an error
// wrapping ErrUnsupported when the process has no group of its own for
// it.
func (g *Group) Dir(c string) (string, error) {
	p, ok := g.domain(c)
	if !ok {
		return "", fmt.Errorf("%w: %s is not mounted for process %d", ErrUnsupported, c, g.pid)
	}
	if g.unified {
		return filepath.Join(g.root, filepath.FromSlash(p)), nil
	}
	return filepath.Join(g.root, c, filepath.FromSlash(p)), nil
}

// SetMemoryMax limits the group's memory (RSS and page cache, kernel
// memory too on v2) to bytes: memory.max on v2, memory.limit_in_bytes and,
// where swap accounting exists, memory.memsw.limit_in_bytes on v1 (so the
// limit cannot be escaped into swap). The kernel reclaims and then
// OOM-kills inside the group when it is reached. It returns the file
// written.
func (g *Group) SetMemoryMax(bytes int64) (string, error) {
	dir, err := g.Dir("memory")
	if err != nil {
		return "", err
	}
	if g.unified {
		return g.write(dir, "memory.max", strconv.FormatInt(bytes, 10))
	}
	file, err := g.write(dir, "memory.limit_in_bytes", strconv.FormatInt(bytes, 10))
	if err != nil {
		return "", err
	}
	if _, serr := os.Stat(filepath.Join(dir, "memory.memsw.limit_in_bytes")); serr == nil {
		if _, err := g.write(dir, "memory.memsw.limit_in_bytes", strconv.FormatInt(bytes, 10)); err != nil {
			return "", err
		}
	}
	return file, nil
}

// SetPidsMax limits the tasks (processes and threads) of the group to n
// via pids.max: a clone beyond it fails with EAGAIN. On v1, where libvirt
// left the pids controller out and the process sits in an ancestor group
// (typically the root), SetPidsMax makes the domain's group in the pids
// hierarchy at the same path as its memory group and moves the process in
// (writing cgroup.procs moves every thread); [Group.Remove] deletes it
// after the process ended. On v2 the controller must be enabled for the
// domain's group (systemd does this for machine.slice); otherwise the
// error wraps ErrUnsupported. It returns the file written.
func (g *Group) SetPidsMax(n int64) (string, error) {
	if !g.unified {
		if err := g.ensureV1("pids"); err != nil {
			return "", err
		}
	}
	dir, err := g.Dir("pids")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "pids.max")); err != nil {
		return "", fmt.Errorf("%w: no pids.max in %s (enable the pids controller in its parent's cgroup.subtree_control)", ErrUnsupported, dir)
	}
	return g.write(dir, "pids.max", strconv.FormatInt(n, 10))
}

// ensureV1 gives the process its own group in v1 hierarchy c when it sits
// in an ancestor of its domain's group (libvirt left c out).
func (g *Group) ensureV1(c string) error {
	cur, ok := g.paths[c]
	if !ok {
		return fmt.Errorf("%w: the %s controller is not mounted", ErrUnsupported, c)
	}
	want := g.reference()
	if want == "" || !isAncestor(cur, want) {
		return nil // already in a group of its own
	}
	dir := filepath.Join(g.root, c, filepath.FromSlash(want))
	if _, err := os.Stat(filepath.Join(g.root, c)); err != nil {
		return fmt.Errorf("%w: %s hierarchy: %v", ErrUnsupported, c, err)
	}
	// Parents (e.g. /machine) stay: other domains may share them.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("make %s group %s: %w", c, filepath.Dir(dir), err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s group %s: %w", c, dir, err)
	} else if err == nil {
		g.made = append(g.made, dir)
	}
	if _, err := g.write(dir, "cgroup.procs", strconv.Itoa(g.pid)); err != nil {
		return err
	}
	g.paths[c] = want
	return nil
}

// reference is the domain path libvirt chose, from the memory, cpu or
// blkio hierarchy (v1), or "" when none is known.
func (g *Group) reference() string {
	for _, c := range []string{"memory", "cpu", "blkio"} {
		if p, ok := g.paths[c]; ok && p != "/" {
			return DomainPath(p)
		}
	}
	return ""
}

// isAncestor reports whether a is a strict ancestor of b ("/" of
// everything else).
func isAncestor(a, b string) bool {
	if a == b {
		return false
	}
	return a == "/" || strings.HasPrefix(b, strings.TrimSuffix(a, "/")+"/")
}

// Remove deletes the groups SetPidsMax created once they are empty (the
// process has ended). A group still in use fails with EBUSY: call it
// again later. Groups made by libvirt are not touched.
func (g *Group) Remove() error {
	var errs []error
	kept := g.made[:0]
	for _, dir := range g.made {
		if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove group %s: %w", dir, err))
			kept = append(kept, dir)
		}
	}
	g.made = kept
	return errors.Join(errs...)
}

// domainGroup matches the name libvirt gives a domain's group in a v1
// hierarchy without systemd, which SetPidsMax gives it in the pids
// hierarchy too: qemu-ID-NAME.libvirt-qemu. The submatch is NAME.
var domainGroup = regexp.MustCompile(`^qemu-[0-9]+-(.+)\.libvirt-qemu$`)

// leftoverDepth bounds how deep RemoveLeftovers looks below the pids
// hierarchy's root: libvirt's partition (/machine), its group, and one
// level more for a nested partition.
const leftoverDepth = 3

// RemoveLeftovers removes the groups SetPidsMax made in the v1 pids
// hierarchy for domains that are gone: those nobody removed because their
// domain ended while no agentbox process watched it (a daemon that was
// down or killed, an in-process run killed). It reads the directories
// below ROOT/pids (at most leftoverDepth levels down) named as libvirt
// names a domain's group whose domain name ours accepts, then asks live
// for the names of the domains that run (after the reading, so a domain
// that made its group meanwhile is among them), and removes the groups of
// the others. A group still in use (it has tasks: EBUSY) stays, and so
// does every group of other domains; on v2, where agentbox makes no
// group, it does nothing. It returns the directories removed; errors:
// live's, and removals that failed otherwise (joined).
func RemoveLeftovers(opts Options, ours func(domain string) bool, live func() (map[string]bool, error)) ([]string, error) {
	if opts.Root == "" {
		opts.Root = DefaultRoot
	}
	if opts.unified() {
		return nil, nil
	}
	base := filepath.Join(opts.Root, "pids")
	type group struct{ dir, domain string }
	var found []group
	filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil // unreadable or gone: nothing of ours to remove there
		}
		if m := domainGroup.FindStringSubmatch(d.Name()); m != nil && ours(m[1]) {
			found = append(found, group{p, m[1]})
			return filepath.SkipDir
		}
		if rel, _ := filepath.Rel(base, p); rel != "." && strings.Count(rel, string(filepath.Separator)) >= leftoverDepth-1 {
			return filepath.SkipDir
		}
		return nil
	})
	if len(found) == 0 {
		return nil, nil
	}
	running, err := live()
	if err != nil {
		return nil, fmt.Errorf("remove leftover pids groups: %w", err)
	}
	var removed []string
	var errs []error
	for _, g := range found {
		if running[g.domain] {
			continue
		}
		switch err := unix.Rmdir(g.dir); {
		case err == nil:
			removed = append(removed, g.dir)
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOTEMPTY):
			// Gone meanwhile, or still in use.
		default:
			errs = append(errs, fmt.Errorf("remove group %s: %w", g.dir, err))
		}
	}
	return removed, errors.Join(errs...)
}

// Made returns the directories SetPidsMax created and Remove has not yet
// deleted.
func (g *Group) Made() []string { return append([]string(nil), g.made...) }

// Stats is a group's usage as the kernel counts it.
type Stats struct {
	// MemoryBytes is the group's memory use (memory.current on v2,
	// memory.usage_in_bytes on v1, both including page cache), in bytes;
	// -1 when unknown.
	MemoryBytes int64
	// MemoryAnonBytes and MemoryFileBytes are the parts of MemoryBytes
	// that are anonymous memory and page cache (memory.stat "anon" and
	// "file" on v2, "total_rss" and "total_cache" on v1), in bytes; -1
	// when unknown. Page cache is charged to the group whose process
	// first faulted the page in, and stays charged there while other
	// groups use it; the kernel reclaims clean page cache before it
	// OOM-kills at the limit (see vmctl/sandbox/RESOURCES.md).
	MemoryAnonBytes, MemoryFileBytes int64
	// MemoryMaxBytes is the memory limit in force, in bytes; -1 for none
	// or unknown.
	MemoryMaxBytes int64
	// Pids is the number of tasks (pids.current); -1 when unknown.
	Pids int64
	// PidsMax is the task limit in force (pids.max); -1 for none or
	// unknown.
	PidsMax int64
}

// Stats reads the group's usage and limits; what cannot be read is -1.
func (g *Group) Stats() Stats {
	s := Stats{MemoryBytes: -1, MemoryAnonBytes: -1, MemoryFileBytes: -1, MemoryMaxBytes: -1, Pids: -1, PidsMax: -1}
	if dir, err := g.Dir("memory"); err == nil {
		s.MemoryAnonBytes, s.MemoryFileBytes = memoryStat(filepath.Join(dir, "memory.stat"), g.unified)
		if g.unified {
			s.MemoryBytes = readInt(filepath.Join(dir, "memory.current"))
			s.MemoryMaxBytes = readInt(filepath.Join(dir, "memory.max"))
		} else {
			s.MemoryBytes = readInt(filepath.Join(dir, "memory.usage_in_bytes"))
			s.MemoryMaxBytes = readInt(filepath.Join(dir, "memory.limit_in_bytes"))
			if s.MemoryMaxBytes >= 1<<62 { // v1 "unlimited" is PAGE_COUNTER_MAX pages
				s.MemoryMaxBytes = -1
			}
		}
	}
	if dir, err := g.Dir("pids"); err == nil && (g.unified || g.paths["pids"] != "/") {
		s.Pids = readInt(filepath.Join(dir, "pids.current"))
		s.PidsMax = readInt(filepath.Join(dir, "pids.max"))
	}
	return s
}

// memoryStat reads the anonymous and file bytes of a memory.stat file:
// "anon" and "file" on v2; on v1 "total_rss" and "total_cache" (the
// group and its children), else "rss" and "cache". -1 for a field that
// is missing, or both when the file cannot be read.
func memoryStat(p string, unified bool) (anon, file int64) {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1, -1
	}
	v := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		k, val, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(val, 10, 64); err == nil {
			v[k] = n
		}
	}
	get := func(keys ...string) int64 {
		for _, k := range keys {
			if n, ok := v[k]; ok {
				return n
			}
		}
		return -1
	}
	if unified {
		return get("anon"), get("file")
	}
	return get("total_rss", "rss"), get("total_cache", "cache")
}

// write writes value to dir/file (a cgroup control file) and returns its
// path.
func (g *Group) write(dir, file, value string) (string, error) {
	p := filepath.Join(dir, file)
	if err := os.WriteFile(p, []byte(value), 0); err != nil {
		return "", fmt.Errorf("write %s to %s: %w", value, p, err)
	}
	return p, nil
}

// readInt reads a cgroup file holding one integer or "max"; "max" and
// errors give -1.
func readInt(p string) int64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}
