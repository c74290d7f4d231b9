package overlay

import (
	"github.com/agentbox/agentbox/tests/testenv"

	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// requireQemuImg skips without qemu-img, or fails in strict mode (CI).
func requireQemuImg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		testenv.SkipOrFail(t, "qemu-img not found (install qemu-utils): %v", err)
	}
}

// makeBase creates a qcow2 base image of size bytes.
func makeBase(t *testing.T, dir string, size string) string {
	t.Helper()
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, size).CombinedOutput(); err != nil {
		t.Fatalf("create base: %v: %s", err, out)
	}
	return base
}

func TestCreateInspectRemove(t *testing.T) {
	requireQemuImg(t)
	ctx := context.Background()
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	path := filepath.Join(dir, "overlay.qcow2")

	if err := Create(ctx, base, path, Options{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	info, err := Inspect(ctx, path)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	want := Info{Format: "qcow2", VirtualSize: 1 << 20, ActualSize: info.ActualSize, BackingFile: base, BackingFormat: "qcow2"}
	if info != want {
		t.Errorf("Inspect = %+v, want %+v", info, want)
	}

	if err := Remove(path); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("overlay still exists after Remove: %v", err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestCreateRelativeBackingIsRecordedAbsolute(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	t.Chdir(dir)
	if err := Create(context.Background(), "base.qcow2", "o.qcow2", Options{}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	info, err := Inspect(context.Background(), filepath.Join(dir, "o.qcow2"))
	if err != nil {
		t.Fatal(err)
	}
	if info.BackingFile != base {
		t.Errorf("backing file recorded as %q, want %q", info.BackingFile, base)
	}
}

func TestCreateWithSize(t *testing.T) {
	requireQemuImg(t)
	ctx := context.Background()
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	path := filepath.Join(dir, "big.qcow2")
	if err := Create(ctx, base, path, Options{SizeBytes: 8 << 20}); err != nil {
		t.Fatalf("Create: %v", err)
	}
	info, err := Inspect(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if info.VirtualSize != 8<<20 {
		t.Errorf("virtual size %d, want %d", info.VirtualSize, 8<<20)
	}

	small := filepath.Join(dir, "small.qcow2")
	if err := Create(ctx, base, small, Options{SizeBytes: 4096}); err == nil {
		t.Error("Create accepted a size smaller than the backing file")
	}
	if _, err := os.Stat(small); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("rejected overlay left a file: %v", err)
	}
}

func TestCreateRefusesExisting(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	base := makeBase(t, dir, "1M")
	path := filepath.Join(dir, "exists.qcow2")
	if err := os.WriteFile(path, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := Create(context.Background(), base, path, Options{})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Create over an existing file: %v, want fs.ErrExist", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "keep me" {
		t.Errorf("existing file was modified: %q", b)
	}
}

func TestCreateMissingBacking(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "o.qcow2")
	err := Create(context.Background(), filepath.Join(dir, "nope.qcow2"), path, Options{})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Create with a missing backing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Create left %s behind", path)
	}
}

func TestCreateFailureRemovesPartialFile(t *testing.T) {
	requireQemuImg(t)
	dir := t.TempDir()
	// A raw file is not a valid qcow2 backing file: qemu-img fails after
	// Create has reserved the overlay's name.
	raw := filepath.Join(dir, "raw.img")
	if err := os.WriteFile(raw, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "o.qcow2")
	if err := Create(context.Background(), raw, path, Options{}); err == nil {
		t.Fatal("Create accepted a raw backing file declared as qcow2")
	} else {
		t.Logf("expected error: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("failed Create left %s behind", path)
	}
}

func TestInspectMissing(t *testing.T) {
	_, err := Inspect(context.Background(), filepath.Join(t.TempDir(), "none.qcow2"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Inspect of a missing file: %v, want fs.ErrNotExist", err)
	}
}

func TestParseInfo(t *testing.T) {
	out := []byte(`{"backing-filename-format":"qcow2","virtual-size":4194304,"filename":"o.qcow2",
		"format":"qcow2","actual-size":200704,"backing-filename":"/b.qcow2","dirty-flag":false}`)
	got, err := parseInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	want := Info{Format: "qcow2", VirtualSize: 4194304, ActualSize: 200704, BackingFile: "/b.qcow2", BackingFormat: "qcow2"}
	if got != want {
		t.Errorf("parseInfo = %+v, want %+v", got, want)
	}
	if _, err := parseInfo([]byte(`{}`)); err == nil {
		t.Error("parseInfo accepted output without a format")
	}
	if _, err := parseInfo([]byte(`garbage`)); err == nil {
		t.Error("parseInfo accepted garbage")
	}
}
