package overlay

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestDeleteSnapshotRefusesDataFile: an overlay whose header names an
// external data file (what a guest's QEMU could write into its own
// overlay) is refused before qemu-img runs: `qemu-img snapshot -d` would
// open the named file read-write as the daemon.
func TestDeleteSnapshotRefusesDataFile(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "host-file")
	if err := os.WriteFile(target, []byte("host file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	evil := filepath.Join(dir, "overlay.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", "-o", "data_file="+target+",data_file_raw=on", evil, "1M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create with a data file: %v: %s", err, out)
	}
	if err := os.WriteFile(target, []byte("host file\n"), 0o600); err != nil { // create resized it
		t.Fatal(err)
	}
	// (QEMU makes no internal snapshots in such an image, so any tag.)
	if err := DeleteSnapshotOffline(context.Background(), evil, "t1"); !errors.Is(err, ErrExternalDataFile) {
		t.Errorf("DeleteSnapshotOffline = %v, want ErrExternalDataFile", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "host file\n" {
		t.Errorf("the data file: %q, %v; want unchanged", b, err)
	}

	// An overlay of our own passes the check.
	base := makeBase(t, dir, "1M")
	if err := checkNoDataFile(base); err != nil {
		t.Errorf("a plain qcow2: %v", err)
	}
}

// TestQemuImgRunsAsOwner: as root, qemu-img reads an image another user
// owns as that user: with the image in a directory only root may pass,
// Snapshots and Inspect fail with qemu-img's permission error; with the
// directory passable they succeed.
func TestQemuImgRunsAsOwner(t *testing.T) {
	requireQemuImg(t)
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "running qemu-img as an image's owner needs root")
	}
	dir := filepath.Join(testenv.PassableTempDir(t), "sb")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	img := makeBase(t, dir, "1M")
	if err := os.Chown(img, 302997, 302997); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := Snapshots(ctx, img); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("Snapshots of uid 302997's image behind a 0700 root directory = %v, want qemu-img's Permission denied (it runs as 302997)", err)
	}
	if _, err := Inspect(ctx, img); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Errorf("Inspect of uid 302997's image behind a 0700 root directory = %v, want qemu-img's Permission denied (it runs as 302997)", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if list, err := Snapshots(ctx, img); err != nil || len(list) != 0 {
		t.Errorf("Snapshots with the directory passable = %+v, %v; want none, nil", list, err)
	}
	if info, err := Inspect(ctx, img); err != nil || info.Format != Format {
		t.Errorf("Inspect with the directory passable = %+v, %v; want format %s", info, err, Format)
	}
}

// TestSnapshotsRefuseSymlink: Snapshots and DeleteSnapshotOffline do not
// follow a symlink in the overlay's place (to a host file they would read
// or open read-write as root).
func TestSnapshotsRefuseSymlink(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	link := filepath.Join(dir, "overlay.qcow2")
	if err := os.Symlink(base, link); err != nil {
		t.Fatal(err)
	}
	want := link + " is a symbolic link: refused"
	if _, err := Snapshots(context.Background(), link); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Snapshots of a symlink = %v, want %q", err, want)
	}
	if err := DeleteSnapshotOffline(context.Background(), link, "t"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("DeleteSnapshotOffline of a symlink = %v, want %q", err, want)
	}
}
