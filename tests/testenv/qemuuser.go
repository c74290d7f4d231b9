package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// ReachableImage links (or copies, read-only) the test image into a fresh
// directory QEMU's per-sandbox users can reach under serve
// --qemu-uid-range: the image cache under the home directory usually is
// not (root's home is 0700).
func ReachableImage(t testing.TB) string {
	t.Helper()
	src := Image(t)
	dir := filepath.Join(PassableTempDir(t), "image")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		from, to := filepath.Join(src, e.Name()), filepath.Join(dir, e.Name())
		if os.Link(from, to) == nil {
			continue
		}
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// PassableTempDir is a t.TempDir whose parents others may pass (mode
// 0711: traverse, not list), as a state dir for QEMU's users under serve
// --qemu-uid-range must be.
func PassableTempDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
