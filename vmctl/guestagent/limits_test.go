//go:build linux

package guestagent

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

func TestExt4Size(t *testing.T) {
	mkfs, err := exec.LookPath("mke2fs")
	if err != nil {
		testenv.SkipOrFail(t, "mke2fs (e2fsprogs) is not installed: %v", err)
		return
	}
	img := filepath.Join(t.TempDir(), "fs.img")
	// 64 MiB of 4 KiB blocks, 64bit feature on (s_blocks_count_hi read).
	if out, err := exec.Command(mkfs, "-q", "-F", "-t", "ext4", "-b", "4096", "-O", "64bit", img, "64M").CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
	blocks, bs, err := ext4Size(img)
	if err != nil {
		t.Fatal(err)
	}
	if bs != 4096 || blocks != 16384 {
		t.Errorf("ext4Size = %d blocks of %d, want 16384 of 4096", blocks, bs)
	}
	notFS := filepath.Join(t.TempDir(), "zero")
	if err := os.WriteFile(notFS, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ext4Size(notFS); err == nil {
		t.Error("ext4Size accepted a file without a superblock")
	}
}
