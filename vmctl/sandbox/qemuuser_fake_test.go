package sandbox_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/store"
)

func TestParseIDRange(t *testing.T) {
	r, err := sandbox.ParseIDRange("200000-265535")
	if err != nil || *r != (sandbox.IDRange{First: 200000, Last: 265535}) || r.String() != "200000-265535" {
		t.Fatalf("ParseIDRange = %+v, %v", r, err)
	}
	for _, bad := range []string{"", "200000", "5-10", "300-200000x", "200000-200000", "200001-200000", "a-b", "0-4294967295"} {
		if _, err := sandbox.ParseIDRange(bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ParseIDRange(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestReadProcStatus(t *testing.T) {
	p := filepath.Join(t.TempDir(), "status")
	os.WriteFile(p, []byte("Name:\tqemu-system-x86\nUid:\t200777\t200777\t200777\t200777\nGid:\t200778\t200778\t200778\t200778\nGroups:\t200778 \nSeccomp:\t2\nSeccomp_filters:\t1\n"), 0o600)
	st, err := sandbox.ReadProcStatus(p)
	if err != nil || st.UID != 200777 || st.GID != 200778 || len(st.Groups) != 1 || st.Groups[0] != 200778 || st.Seccomp != 2 {
		t.Fatalf("ReadProcStatus = %+v, %v", st, err)
	}
	self, err := sandbox.ReadProcStatus("/proc/self/status")
	if err != nil || self.UID != uint32(os.Getuid()) {
		t.Errorf("ReadProcStatus(/proc/self/status) = %+v, %v; want uid %d", self, err, os.Getuid())
	}
}

// With QEMUUsers, every sandbox gets its own uid of the range (never the
// clone group), its domain spec carries it, its directory and overlay are
// that user's (0700, 0600), the state dir is 0711; a full range refuses a
// create with ErrQEMUUsersExhausted and leaves nothing; a removal frees
// the uid; a restarted manager takes the records' uids again.
func TestQEMUUsersFake(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.SkipOrFail(t, "chown to QEMU users needs root")
	}
	fd := newFakeDriver(t)
	img := fakeImage(t, "d1")
	os.WriteFile(img.Kernel, []byte("kernel"), 0o444)
	os.Chmod(img.Disk, 0o444)
	base := t.TempDir()
	for _, d := range []string{filepath.Dir(img.Dir), img.Dir, filepath.Dir(base), base} {
		os.Chmod(d, 0o755)
	}
	state := filepath.Join(base, "state")
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rng := &sandbox.IDRange{First: 301500, Last: 301502} // two uids
	cfg := sandbox.Config{Driver: fd, StateDir: state, RuntimeDir: testenv.ShortTempDir(t), Store: st, Owner: st.Instance(), QEMUUsers: rng}
	m, _, _, err := newManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("state dir: %v %v, want 0711", fi.Mode(), err)
	}
	create := func(name string) (*sandbox.Sandbox, error) {
		return m.Create(t0, sandbox.Options{Image: img, Accel: tcg, Name: name, BootTimeout: 10 * time.Second})
	}
	a, err := create("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := create("b")
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := a.Record().QEMUUser, b.Record().QEMUUser
	if ua == nil || ub == nil || ua.UID == ub.UID || ua.UID <= rng.First || ub.UID <= rng.First || ua.UID > rng.Last || ub.UID > rng.Last || ua.GID != ua.UID {
		t.Fatalf("QEMU users %+v %+v: want two different uids in %d..%d", ua, ub, rng.First+1, rng.Last)
	}
	for _, sb := range []*sandbox.Sandbox{a, b} {
		u := sb.Record().QEMUUser
		if s := sb.Record().Spec; s == nil || s.QEMUUser == nil || *s.QEMUUser != *u {
			t.Errorf("%s: spec QEMUUser %+v, want %+v", sb.Name, s.QEMUUser, u)
		}
		for _, f := range []struct {
			path     string
			uid, gid uint32
			mode     os.FileMode
		}{{sb.Dir, 0, 0, 0o711}, {sb.Overlay, u.UID, u.GID, 0o600}} {
			fi, err := os.Stat(f.path)
			if err != nil {
				t.Fatal(err)
			}
			if s := fi.Sys().(*syscall.Stat_t); s.Uid != f.uid || s.Gid != f.gid || fi.Mode().Perm() != f.mode {
				t.Errorf("%s: %d:%d %v, want %d:%d %v", f.path, s.Uid, s.Gid, fi.Mode().Perm(), f.uid, f.gid, f.mode)
			}
		}
		fi, err := os.Stat(sb.Overlay)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if got, want := sb.Record().OverlayFile, (sandbox.FileID{Dev: uint64(st.Dev), Ino: st.Ino}); got == nil || *got != want {
			t.Errorf("%s: record's overlay file %+v, want %+v", sb.Name, got, want)
		}
	}
	if _, err := create("c"); !errors.Is(err, sandbox.ErrQEMUUsersExhausted) || !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third create on a range of two: %v, want ErrQEMUUsersExhausted", err)
	}
	if len(m.List()) != 2 || m.QEMUUsersInUse() != 2 {
		t.Fatalf("after the refused create: %d sandboxes, %d uids in use", len(m.List()), m.QEMUUsersInUse())
	}
	if err := m.Remove(t0, a, true); err != nil {
		t.Fatal(err)
	}
	c, err := create("c")
	if err != nil {
		t.Fatalf("create after a removal: %v", err)
	}
	if u := c.Record().QEMUUser; u.UID != ua.UID {
		t.Errorf("c runs as %d, want the freed %d", u.UID, ua.UID)
	}

	// A restarted manager takes the records' uids again (of stopped
	// sandboxes here: a fake domain's agent answers one manager only).
	for _, sb := range []*sandbox.Sandbox{b, c} {
		if err := m.Stop(t0, sb, "test"); err != nil {
			t.Fatal(err)
		}
	}
	plantedStart(t, m, b, img)
	// A directory a QEMU user owned (an agentbox before issue 24) is the
	// daemon's again once a restarted manager has reconciled it.
	if err := os.Chown(c.Dir, int(c.Record().QEMUUser.UID), int(c.Record().QEMUUser.GID)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(c.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	m2, _, _, err := newManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Reconcile(t0); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(c.Dir); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o711 {
		t.Errorf("c's directory after Reconcile: %v %v, want root's, 0711", fi.Mode(), err)
	}
	if n := m2.QEMUUsersInUse(); n != 2 {
		t.Errorf("after Reconcile: %d uids in use, want 2", n)
	}
	for _, sb := range m2.List() {
		m2.Remove(t0, sb, true)
	}
	if n := m2.QEMUUsersInUse(); n != 0 {
		t.Errorf("after removing all: %d uids in use", n)
	}
}

// plantedStart: what a QEMU user could plant in its sandbox's directory
// while it owned it (before issue 24) makes no start chown, chmod or
// follow anything else: an overlay that is a hard link to a host file, or
// another inode than recorded, refuses the start with ErrUnsafeFile and
// leaves the host file as it was; a console log that is a symlink to a
// host file is removed before libvirt opens it. The directory becomes the
// daemon's again (0711). sb is stopped, and stopped again at the end.
func plantedStart(t *testing.T, m *sandbox.Manager, sb *sandbox.Sandbox, img *image.Image) {
	t.Helper()
	u := sb.Record().QEMUUser
	hostFile := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostFile, []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unchanged := func(when string) {
		t.Helper()
		fi, err := os.Stat(hostFile)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(hostFile)
		if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 0 || fi.Mode().Perm() != 0o600 || string(b) != "root's\n" {
			t.Errorf("%s: the host file is %d:%d %v %q, want 0:0 0600 %q", when, st.Uid, st.Gid, fi.Mode().Perm(), b, "root's\n")
		}
	}
	start := func() error {
		return m.Start(t0, sb, sandbox.StartOptions{Image: img, BootTimeout: 10 * time.Second})
	}
	// The directory as a QEMU user owned it before.
	if err := os.Chown(sb.Dir, int(u.UID), int(u.GID)); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(sb.Dir, "overlay.aside")
	if err := os.Rename(sb.Overlay, aside); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(hostFile, sb.Overlay); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostFile, sb.ConsoleLog); err != nil {
		t.Fatal(err)
	}
	if err := start(); !errors.Is(err, sandbox.ErrUnsafeFile) || !strings.Contains(err.Error(), sb.Overlay+" has 2 hard links") {
		t.Errorf("start with the overlay a hard link to a host file: %v, want ErrUnsafeFile", err)
	}
	unchanged("after a start on a hard-linked overlay")
	if _, err := os.Lstat(sb.ConsoleLog); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the planted console log symlink: %v, want removed", err)
	}
	if fi, err := os.Stat(sb.Dir); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 || fi.Mode().Perm() != 0o711 {
		t.Errorf("the sandbox dir after the start: %v %v, want root's, 0711", fi.Mode(), err)
	}
	// Another inode than recorded, of one link and QEMU's user's.
	if err := os.Remove(sb.Overlay); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(aside)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sb.Overlay, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := start(); !errors.Is(err, sandbox.ErrUnsafeFile) || !strings.Contains(err.Error(), "not the inode") {
		t.Errorf("start with another overlay inode than recorded: %v, want ErrUnsafeFile", err)
	}
	// The real one back: the start goes through.
	if err := os.Rename(aside, sb.Overlay); err != nil {
		t.Fatal(err)
	}
	if err := start(); err != nil {
		t.Fatalf("start with the recorded overlay: %v", err)
	}
	unchanged("after the start")
	if err := m.Stop(t0, sb, "test"); err != nil {
		t.Fatal(err)
	}
}
