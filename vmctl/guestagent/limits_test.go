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

func TestCommandLimits(t *testing.T) {
	for _, tc := range []struct {
		memTotal int64
		want     CommandLimits
	}{
		// A 100 MiB guest (MemTotal ≈ 64.6 MiB): no cap instead of 580 KiB.
		{66148 << 10, CommandLimits{MemoryMaxBytes: 0, Pids: 256}},
		{128 << 20, CommandLimits{MemoryMaxBytes: 64 << 20, Pids: 256}},
		{200 << 20, CommandLimits{MemoryMaxBytes: 136 << 20, Pids: 400}},
		{1024 << 20, CommandLimits{MemoryMaxBytes: 896 << 20, Pids: 2048}},
		{64 << 30, CommandLimits{MemoryMaxBytes: 56 << 30, Pids: 32768}},
	} {
		if got := commandLimits(tc.memTotal); got != tc.want {
			t.Errorf("commandLimits(%d) = %+v, want %+v", tc.memTotal, got, tc.want)
		}
	}
}
