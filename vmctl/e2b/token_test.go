package e2b_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/e2b"
)

// TestAccessKeyPrivate: the access key is made readable by its owner
// only, and one that others may read (whoever reads it has every
// sandbox's data plane) is refused, saying how to fix it.
func TestAccessKeyPrivate(t *testing.T) {
	dir := t.TempDir()
	if _, err := e2b.LoadAccessKey(dir); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, e2b.AccessKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", fi.Mode(), err)
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := e2b.LoadAccessKey(dir)
		want := fmt.Sprintf("E2B access key %s may be read by other users (mode %04o): chmod 600 it", path, mode)
		if err != nil && strings.Count(err.Error(), "E2B access key") != 1 {
			t.Errorf("mode %v: %v", mode, err)
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mode %v: %v, want %q", mode, err, want)
		}
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := e2b.LoadAccessKey(dir); err != nil {
		t.Errorf("mode 0400: %v", err)
	}
}
