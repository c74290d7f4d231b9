package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// QEMU without root (docs/security.md). With Config.QEMUUsers set, every
// sandbox gets a uid of its own from the range (uid = gid, kept in
// Record.QEMUUser, freed when the sandbox is removed, taken again by
// Reconcile), and every domain it starts runs its QEMU as that user
// through libvirt's per-domain DAC label (domain.QEMUUser, relabel='no').
// The manager, not libvirt, hands the user its own files before each
// domain start (confine): its overlay (0600) and a memory template
// build's RAM file, through descriptors (hostfile.go). The sandbox
// directory stays the daemon's (0711: QEMU's user passes it to open its
// overlay, and cannot add, rename or replace an entry). Shared files stay
// root's: the image (0444, world-readable), a memory template's RAM file
// (0660 root:CloneGroup, see IDRange). The state dir and the directories
// on the way to what QEMU opens are 0711: passable, not listable.

// qemuUsers is a Manager's confinement of QEMU: the uids it hands out
// and the files it gives them (the methods below). It is a part of the
// Manager it points to (linkedManager).
type qemuUsers struct{ *Manager }

// ErrQEMUUsersExhausted: every uid of Config.QEMUUsers is held by a
// sandbox (or by another process on the host).
var ErrQEMUUsersExhausted = errdefs.New(errdefs.ErrResourceExhausted, "qemu_users_exhausted", "no free QEMU user")

// IDRange is the range of host uids and gids the sandboxes' QEMU
// processes run as (serve --qemu-uid-range FIRST-LAST, inclusive). First
// is the clone group: the gid every clone of a memory template runs with
// and the group of the templates' RAM files (QEMU 7.2 opens a RAM file
// read-write even to map it privately, so the clones need the group's
// write permission; docs/security.md says what that allows). First+1 …
// Last are handed out one per sandbox as its uid and gid. Choose ids no
// account, no /etc/subuid range and no other agentbox daemon on the host
// uses.
type IDRange struct {
	First, Last uint32
}

// ParseIDRange parses "FIRST-LAST" (inclusive, FIRST ≥ 1000, at least
// two ids). Errors: ErrInvalid saying what to write.
func ParseIDRange(s string) (*IDRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	first, err1 := strconv.ParseUint(lo, 10, 32)
	last, err2 := strconv.ParseUint(hi, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: QEMU uid range %q: want FIRST-LAST, e.g. 200000-265535", ErrInvalid, s)
	}
	if first < 1000 || last <= first || last >= 1<<32-1 {
		return nil, fmt.Errorf("%w: QEMU uid range %q: want 1000 ≤ FIRST < LAST < 4294967295 (FIRST is the clone group, the rest one uid per sandbox), e.g. 200000-265535", ErrInvalid, s)
	}
	return &IDRange{First: uint32(first), Last: uint32(last)}, nil
}

// String returns "FIRST-LAST".
func (r IDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// CloneGroup returns the clone group (IDRange.First) when QEMU runs
// confined; ok is false when Config.QEMUUsers is nil.
func (m *qemuUsers) CloneGroup() (gid uint32, ok bool) {
	if m.cfg.QEMUUsers == nil {
		return 0, false
	}
	return m.cfg.QEMUUsers.First, true
}

// QEMUUsersInUse returns how many uids of the range sandboxes hold.
func (m *qemuUsers) QEMUUsersInUse() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.qemuIDs)
}

// prepareStateDir makes StateDir and its sandboxes directory passable
// (0711) for the QEMU users and checks that every directory above
// StateDir is too. Errors: ErrInvalid naming the directory to fix.
func (m *qemuUsers) prepareStateDir() error {
	if m.cfg.QEMUUsers == nil {
		return nil
	}
	for _, dir := range []string{m.cfg.StateDir, SandboxesDir(m.cfg.StateDir)} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
		if err := os.Chmod(dir, 0o711); err != nil {
			return fmt.Errorf("state dir: %w", err)
		}
	}
	if err := passable(filepath.Dir(m.cfg.StateDir)); err != nil {
		return fmt.Errorf("%w: QEMU runs as uids %s (--qemu-uid-range) and opens each overlay under the state dir %s, but %v: chmod o+x it, choose another --state-dir, or --qemu-uid-range off", ErrInvalid, m.cfg.QEMUUsers, m.cfg.StateDir, err)
	}
	return nil
}

// passable checks that dir and every directory above it lets others pass
// (o+x).
func passable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is mode %04o", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// readable checks that others can read path and pass every directory
// above it.
func readable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o004 == 0 {
		return fmt.Errorf("%s is mode %04o", path, fi.Mode().Perm())
	}
	return passable(filepath.Dir(path))
}

// assignQEMUUser gives sb a uid of the range, or takes the one its
// record names (Reconcile): in the range and free, it is kept; otherwise
// sb gets a new one (its files are chowned at its next domain start).
// Call with m.mu held. Errors: ErrQEMUUsersExhausted.
func (m *qemuUsers) assignQEMUUserLocked(sb *Sandbox) error {
	r := m.cfg.QEMUUsers
	if r == nil {
		return nil
	}
	if m.qemuIDs == nil {
		m.qemuIDs = map[uint32]string{}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if u := sb.rec.QEMUUser; u != nil && u.UID > r.First && u.UID <= r.Last && m.qemuIDs[u.UID] == "" {
		m.qemuIDs[u.UID] = sb.ID
		return nil
	}
	busy := processUIDs()
	n := r.Last - r.First // ids First+1 … Last
	start := rand.Uint32N(n)
	for i := range n {
		id := r.First + 1 + (start+i)%n
		if m.qemuIDs[id] != "" || busy[id] {
			continue
		}
		m.qemuIDs[id] = sb.ID
		sb.rec.QEMUUser = &domain.QEMUUser{UID: id, GID: id}
		return nil
	}
	return fmt.Errorf("%w: all %d QEMU uids of %s are in use: remove sandboxes or widen --qemu-uid-range", ErrQEMUUsersExhausted, n, r)
}

// releaseQEMUUserLocked frees sb's uid. Call with m.mu held.
func (m *qemuUsers) releaseQEMUUserLocked(sb *Sandbox) {
	sb.mu.Lock()
	u := sb.rec.QEMUUser
	sb.mu.Unlock()
	if u != nil && m.qemuIDs[u.UID] == sb.ID {
		delete(m.qemuIDs, u.UID)
	}
}

// processUIDs returns the real uids of the host's processes (from
// /proc/PID/status), so a uid another daemon's QEMU runs as is not handed
// out again. Unreadable entries are skipped.
func processUIDs() map[uint32]bool {
	uids := map[uint32]bool{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if st, err := ReadProcStatus(filepath.Join("/proc", e.Name(), "status")); err == nil {
			uids[st.UID] = true
		}
	}
	return uids
}

// confine runs before every domain start of sb (StepDomain): with a
// QEMU user, it makes sb's directory the daemon's, mode 0711 (taking it
// back from a QEMU user that owned it before issue 24), gives that user
// sb's overlay (0600; only the inode Record.OverlayFile names, which the
// first confine records) and, for a memory template's build, its RAM
// file (created 0600), each through OpenSandboxFile's descriptor; it
// checks that the image's files are readable by others on a passable
// path, makes the directories from the state dir to a RAM file passable
// (0711), and sets spec.QEMUUser — with the clone group as gid for a
// clone of a memory template (its RAM file mapped privately). Without
// one, spec.QEMUUser is cleared (a restored spec carries its source's).
// Errors: ErrFailedPrecondition for an image QEMU cannot read;
// ErrUnsafeFile for an overlay or RAM file that is a symlink, a hard
// link, not a regular file or another inode than recorded; chown's (the
// daemon needs CAP_CHOWN).
func (m *qemuUsers) confine(sb *Sandbox, spec *domain.Spec) error {
	u := sb.Record().QEMUUser
	if u == nil || m.cfg.QEMUUsers == nil {
		spec.QEMUUser = nil
		return nil
	}
	label := *u
	for _, f := range []string{spec.Kernel, spec.Initrd, sb.Image.Disk} {
		if f == "" {
			continue
		}
		if err := readable(f); err != nil {
			return fmt.Errorf("%w: QEMU runs as uid %d and cannot read the image file %s: %v: make the image directory and every directory above it passable (chmod o+x) and its files readable (0444), or serve with --qemu-uid-range off", errdefs.ErrFailedPrecondition, label.UID, f, err)
		}
	}
	if mb := spec.MemoryBackend; mb != nil && mb.File != "" {
		if err := m.passableUnderState(filepath.Dir(mb.File)); err != nil {
			return err
		}
		if mb.Shared {
			f, err := createSandboxFile(mb.File, 0o600)
			if err != nil {
				return fmt.Errorf("memory template RAM file: %w", err)
			}
			err = f.Chown(int(label.UID), int(label.GID))
			f.Close()
			if err != nil {
				return fmt.Errorf("give the RAM file to QEMU's user: %w", err)
			}
		} else {
			label.GID = m.cfg.QEMUUsers.First
		}
	}
	// The directory stays the daemon's (QEMU's user may pass, not list or
	// change it); the overlay, opened without following a link and only
	// as the inode recorded, becomes QEMU's user's through its descriptor.
	if err := secureDir(sb.Dir, 0o711); err != nil {
		return err
	}
	// What a QEMU user planted while the directory was its own: the
	// console log libvirt (virtlogd, root) is about to open by name.
	if dropped, err := dropPlanted(sb.ConsoleLog); err != nil {
		return err
	} else if dropped != "" {
		m.log.Warn("removed a planted console log", "sandbox", sb.ID, "path", sb.ConsoleLog, "was", dropped)
	}
	f, id, err := OpenSandboxFile(sb.Overlay, os.O_RDONLY, sb.Record().OverlayFile)
	if err != nil {
		return fmt.Errorf("give the overlay to QEMU's user %d: %w", label.UID, err)
	}
	defer f.Close()
	if err := giveFile(f, int(label.UID), int(label.GID), 0o600); err != nil {
		return fmt.Errorf("give %s to QEMU's user %d (the daemon needs CAP_CHOWN): %w", sb.Overlay, label.UID, err)
	}
	sb.mu.Lock()
	sb.rec.OverlayFile = &id
	sb.mu.Unlock()
	spec.QEMUUser = &label
	return nil
}

// takeBackDir makes the directory of a sandbox Reconcile found, whose
// QEMU may still run, the daemon's (0711) when it has a QEMU user: an
// agentbox before issue 24 gave the directory to that user, who could
// plant links in it until the sandbox's next start. A failure is logged
// (confine tries again at the next start).
func (m *qemuUsers) takeBackDir(sb *Sandbox) {
	if m.cfg.QEMUUsers == nil || sb.Record().QEMUUser == nil {
		return
	}
	if err := secureDir(sb.Dir, 0o711); err != nil && !errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("take the sandbox directory back from QEMU's user", "sandbox", sb.ID, "err", err)
	}
}

// passableUnderState makes dir and the directories between it and the
// state dir passable (0711 at least). dir outside the state dir must be
// passable already.
func (m *qemuUsers) passableUnderState(dir string) error {
	rel, err := filepath.Rel(m.cfg.StateDir, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		if err := passable(dir); err != nil {
			return fmt.Errorf("%w: QEMU's user cannot reach %s: %v", errdefs.ErrFailedPrecondition, dir, err)
		}
		return nil
	}
	for d := dir; d != m.cfg.StateDir && d != filepath.Dir(d); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, fi.Mode().Perm()|0o711); err != nil {
			return err
		}
	}
	return nil
}

// ShareTemplateRAM makes a finished memory template's RAM file what its
// clones open: with QEMU users, root's with the clone group, 0660 (QEMU
// 7.2 opens a memory-backend-file read-write even with share=off, to map
// it privately); without, 0400 as before.
func (m *qemuUsers) ShareTemplateRAM(path string) error {
	gid, ok := m.CloneGroup()
	if !ok {
		return os.Chmod(path, 0o400)
	}
	f, _, err := OpenSandboxFile(path, os.O_RDONLY, nil) // its build's QEMU user owned it
	if err != nil {
		return fmt.Errorf("memory template RAM file: %w", err)
	}
	defer f.Close()
	if err := giveFile(f, 0, int(gid), 0o660); err != nil {
		return fmt.Errorf("memory template RAM file: %w", err)
	}
	return nil
}

// ProcStatus is what /proc/PID/status says about a process's
// confinement.
type ProcStatus struct {
	// UID and GID are the real user and group ids.
	UID, GID uint32
	// Groups are the supplementary groups.
	Groups []uint32
	// Seccomp is the seccomp mode: 0 off, 1 strict, 2 filter.
	Seccomp int
}

// ReadProcStatus parses the Uid, Gid, Groups and Seccomp lines of a
// /proc/PID/status file.
func ReadProcStatus(path string) (ProcStatus, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return ProcStatus{}, err
	}
	var st ProcStatus
	seen := 0
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		num := func(i int) uint32 {
			if i >= len(f) {
				return 0
			}
			n, _ := strconv.ParseUint(f[i], 10, 32)
			return uint32(n)
		}
		switch k {
		case "Uid":
			st.UID, seen = num(0), seen+1
		case "Gid":
			st.GID, seen = num(0), seen+1
		case "Groups":
			for i := range f {
				st.Groups = append(st.Groups, num(i))
			}
		case "Seccomp":
			st.Seccomp = int(num(0))
		}
	}
	if seen < 2 {
		return ProcStatus{}, fmt.Errorf("%s: no Uid/Gid lines", path)
	}
	return st, nil
}

// Reclaim gives a file a sandbox's QEMU user owned back to the daemon
// (its own uid and gid) when it leaves the sandbox: an overlay kept for
// its snapshots or as a warm template. Otherwise the next sandbox handed
// the same uid would own it. A no-op without QEMU users. Errors:
// ErrUnsafeFile for a path that is not a regular file of one link
// (OpenSandboxFile); chown's.
func (m *qemuUsers) Reclaim(path string) error {
	if m.cfg.QEMUUsers == nil {
		return nil
	}
	f, _, err := OpenSandboxFile(path, os.O_RDONLY, nil)
	if err != nil {
		return fmt.Errorf("take %s back from QEMU's user: %w", path, err)
	}
	defer f.Close()
	if err := f.Chown(os.Getuid(), os.Getgid()); err != nil {
		return fmt.Errorf("take %s back from QEMU's user: %w", path, err)
	}
	return nil
}
