package overlay

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sparseFile writes a file of size bytes with data only at the given
// offsets (64 KiB each) and returns its content.
func sparseFile(t *testing.T, path string, size int64, offsets ...int64) []byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for i, off := range offsets {
		chunk := bytes.Repeat([]byte{byte('a' + i)}, 64<<10)
		if _, err := f.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], chunk)
	}
	return want
}

func blocks(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}

// onlyFiles fails unless dir holds exactly names.
func onlyFiles(t *testing.T, dir string, names ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}

// withClone replaces the reflink call for one test.
func withClone(t *testing.T, fn func(dst, src *os.File) error) {
	old := cloneFile
	cloneFile = fn
	t.Cleanup(func() { cloneFile = old })
}

// TestCopySparse: the fallback copy (reflink refused) keeps content and
// holes, and only dst is left.
func TestCopySparse(t *testing.T) {
	tries := 0
	withClone(t, func(dst, src *os.File) error { tries++; return unix.EOPNOTSUPP })
	dir := t.TempDir()
	src := filepath.Join(dir, "src.qcow2")
	want := sparseFile(t, src, 40<<20+123, 0, 10<<20, 40<<20+123-(64<<10))
	dst := filepath.Join(dir, "dst.qcow2")
	if err := Copy(context.Background(), src, dst); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if tries != 1 {
		t.Errorf("reflink tried %d times, want 1", tries)
	}
	got, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("copy differs from source (%d vs %d bytes)", len(got), len(want))
	}
	if b, sb := blocks(t, dst), blocks(t, src); b > sb {
		t.Errorf("copy takes %d blocks, source %d: holes were filled", b, sb)
	}
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	onlyFiles(t, dir, "dst.qcow2", "src.qcow2")
}

// TestCopyReflink: the real reflink is tried first, and when it works its
// result is kept (no second copy).
func TestCopyReflink(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	sparseFile(t, src, 1<<20, 0)

	var realErr error
	withClone(t, func(dst, src *os.File) error {
		realErr = unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
		return realErr
	})
	if err := Copy(context.Background(), src, filepath.Join(dir, "real")); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	t.Logf("FICLONE on this filesystem: %v", realErr)

	// A clone that "succeeds" with its own bytes: Copy keeps them.
	withClone(t, func(dst, src *os.File) error {
		_, err := dst.WriteString("cloned")
		return err
	})
	dst := filepath.Join(dir, "fake")
	if err := Copy(context.Background(), src, dst); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "cloned" {
		t.Errorf("content %q: the fallback ran after a successful reflink", b)
	}
}

// TestCopyErrors: nothing is left behind, and an existing dst is never
// replaced.
func TestCopyErrors(t *testing.T) {
	withClone(t, func(dst, src *os.File) error { return unix.EOPNOTSUPP })
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	sparseFile(t, src, 8<<20, 0, 4<<20)
	ctx := context.Background()

	dst := filepath.Join(dir, "dst")
	if err := os.WriteFile(dst, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Copy(ctx, src, dst); !errors.Is(err, fs.ErrExist) {
		t.Errorf("Copy onto an existing file: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "mine" {
		t.Errorf("existing dst overwritten: %q", b)
	}
	if err := Copy(ctx, filepath.Join(dir, "missing"), filepath.Join(dir, "x")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Copy of a missing file: %v, want fs.ErrNotExist", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Copy(cctx, src, filepath.Join(dir, "x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Copy with a cancelled ctx: %v", err)
	}
	if err := Copy(ctx, src, filepath.Join(dir, "nodir", "x")); err == nil {
		t.Error("Copy into a missing directory succeeded")
	}
	onlyFiles(t, dir, "dst", "src")
}

// TestCopyENOSPC: a copy that does not fit leaves nothing behind.
func TestCopyENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	withClone(t, func(dst, src *os.File) error { return unix.EOPNOTSUPP })
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	sparseFile(t, src, 8<<20, 0, 1<<20, 2<<20, 3<<20, 4<<20) // 320 KiB of data
	small := filepath.Join(dir, "small")
	if err := os.Mkdir(small, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", small).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", small).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	err := Copy(context.Background(), src, filepath.Join(small, "dst"))
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("Copy onto a full tmpfs: %v, want ENOSPC", err)
	}
	onlyFiles(t, small)
}

func TestSnapshotsOffline(t *testing.T) {
	requireQemuImg(t)
	ctx := context.Background()
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	path := filepath.Join(dir, "overlay.qcow2")
	if err := Create(ctx, base, path, Options{}); err != nil {
		t.Fatal(err)
	}
	list, err := Snapshots(ctx, path)
	if err != nil || len(list) != 0 {
		t.Fatalf("Snapshots of a new overlay = %v, %v", list, err)
	}
	before := time.Now().Add(-time.Second)
	for _, tag := range []string{"first", "second"} {
		if out, err := exec.Command("qemu-img", "snapshot", "-c", tag, path).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img snapshot -c: %v: %s", err, out)
		}
	}
	list, err = Snapshots(ctx, path)
	if err != nil || len(list) != 2 {
		t.Fatalf("Snapshots = %+v, %v", list, err)
	}
	for i, tag := range []string{"first", "second"} {
		s := list[i]
		if s.Tag != tag || s.ID != []string{"1", "2"}[i] || s.VMStateSize != 0 || s.VMClock != 0 || s.Date.Before(before) || s.Date.After(time.Now()) {
			t.Errorf("snapshot %d = %+v", i, s)
		}
	}

	if err := DeleteSnapshotOffline(ctx, path, "first"); err != nil {
		t.Fatalf("DeleteSnapshotOffline: %v", err)
	}
	if err := DeleteSnapshotOffline(ctx, path, "first"); !errors.Is(err, ErrNoSnapshot) {
		t.Errorf("second DeleteSnapshotOffline: %v, want ErrNoSnapshot", err)
	}
	// "2" is the id of "second", not a tag: never deleted by id.
	if err := DeleteSnapshotOffline(ctx, path, "2"); err == nil {
		t.Error("DeleteSnapshotOffline by id succeeded")
	}
	list, err = Snapshots(ctx, path)
	if err != nil || len(list) != 1 || list[0].Tag != "second" {
		t.Errorf("Snapshots after delete = %+v, %v", list, err)
	}
}

func TestSnapshotsBadFiles(t *testing.T) {
	requireQemuImg(t)
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Snapshots(ctx, filepath.Join(dir, "missing.qcow2")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if err := DeleteSnapshotOffline(ctx, filepath.Join(dir, "missing.qcow2"), "t"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("DeleteSnapshotOffline of a missing file: %v, want fs.ErrNotExist", err)
	}

	base := makeBase(t, dir, "1M")
	truncated := filepath.Join(dir, "truncated.qcow2")
	b, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(truncated, b[:100], 0o600); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(dir, "garbage.qcow2")
	if err := os.WriteFile(garbage, bytes.Repeat([]byte("not an image "), 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{truncated, garbage} {
		_, err := Snapshots(ctx, p)
		if err == nil || !strings.Contains(err.Error(), "not a readable qcow2 image") {
			t.Errorf("Snapshots(%s) = %v, want a not-readable error", filepath.Base(p), err)
		} else {
			t.Logf("%s: %v", filepath.Base(p), err)
		}
	}
}
