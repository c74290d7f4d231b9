package resources

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestMemoryHardLimitMiB(t *testing.T) {
	for _, tc := range []struct {
		guest int64
		tcg   bool
		want  int64
	}{
		{256, true, 1076},  // (256+160+256)×1.6 = 1075.2, rounded up
		{512, true, 1485},  // 928×1.6 = 1484.8
		{512, false, 1076}, // 672×1.6
		{4096, false, 6810},
	} {
		got := MemoryHardLimitMiB(tc.guest, tc.tcg)
		if got != tc.want {
			t.Errorf("MemoryHardLimitMiB(%d, %v) = %d, want %d", tc.guest, tc.tcg, got, tc.want)
		}
		// Normal use — all guest RAM touched, QEMU's overhead and a full
		// TCG cache — stays at or below 65 % of the limit.
		normal := tc.guest + QEMUOverheadMiB
		if tc.tcg {
			normal += TCGCacheMiB
		}
		if normal*100/got > 65 {
			t.Errorf("normal use %d MiB is %d%% of the limit %d", normal, normal*100/got, got)
		}
	}
	// What a fresh-user test saw on a 512 MiB TCG guest (QEMU RSS 870..915
	// MiB, 80..84 % of the old 1088 MiB limit) is now under 62 %.
	if pct := 915 * 100 / MemoryHardLimitMiB(512, true); pct > 62 {
		t.Errorf("915 MiB is %d%% of the 512 MiB TCG guest's limit", pct)
	}
}

func TestResolve(t *testing.T) {
	img := &image.Image{Manifest: image.Manifest{Resources: image.Resources{VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096, CPUQuotaPercent: 150}}}
	v, m, r := Resolve(img, 0, 0, sandbox.ResourceRequest{})
	if v != 2 || m != 1024 || r != (sandbox.ResourceRequest{DiskMiB: 4096, CPUQuotaPercent: 150, Pids: DefaultPids}) {
		t.Errorf("image defaults: %d %d %+v", v, m, r)
	}
	v, m, r = Resolve(img, 1, 256, sandbox.ResourceRequest{DiskMiB: 5000, CPUQuotaPercent: 20, IOPS: 5, Pids: 64})
	if v != 1 || m != 256 || r != (sandbox.ResourceRequest{DiskMiB: 5000, CPUQuotaPercent: 20, IOPS: 5, Pids: 64}) {
		t.Errorf("overrides: %d %d %+v", v, m, r)
	}
	// The image's quota of 150 % (made for 2 vCPUs) is lowered to what 1
	// vCPU can use.
	if v, _, r = Resolve(img, 1, 0, sandbox.ResourceRequest{}); v != 1 || r.CPUQuotaPercent != 100 {
		t.Errorf("1 vCPU with the image's quota: %d %+v", v, r)
	}
}

func TestCheckRequest(t *testing.T) {
	for _, tc := range []struct {
		vcpus, mem int
		r          sandbox.ResourceRequest
		want       string
	}{
		{1, 100, sandbox.ResourceRequest{}, "memory 100 MiB is below the minimum of 256 MiB"},
		{1, 255, sandbox.ResourceRequest{}, "ask for at least 256 MiB"},
		{1, -1, sandbox.ResourceRequest{}, "memory -1 MiB"},
		{1, 0, sandbox.ResourceRequest{DiskMiB: -1}, "disk -1 MiB"},
		{64, 0, sandbox.ResourceRequest{CPUQuotaPercent: 6401}, "cpu quota 6401%: want 1..6400"},
		{1, 0, sandbox.ResourceRequest{CPUQuotaPercent: -5}, "cpu quota -5%"},
		{1, 0, sandbox.ResourceRequest{CPUQuotaPercent: 500}, "cpu quota 500% has no effect on 1 vCPU(s): a VM uses at most 100% per vCPU; ask for at most 100%"},
		{2, 0, sandbox.ResourceRequest{CPUQuotaPercent: 201}, "ask for at most 200%"},
		{1, 0, sandbox.ResourceRequest{IOBytesPerSec: -1}, "io throughput cap -1 bytes/s"},
		{1, 0, sandbox.ResourceRequest{IOBytesPerSec: 10}, "io throughput cap 10 bytes/s is below the minimum of 1048576 bytes/s (1 MiB/s)"},
		{1, 0, sandbox.ResourceRequest{IOBytesPerSec: MinIOBytesPerSec - 1}, "below the minimum"},
		{1, 0, sandbox.ResourceRequest{IOPS: 1}, fmt.Sprintf("io operations cap 1 ops/s is below the minimum of %d ops/s", MinIOPS)},
		{1, 0, sandbox.ResourceRequest{IOWeight: 99}, "io weight 99: want 100..1000"},
		{1, 0, sandbox.ResourceRequest{IOWeight: 1001}, "io weight 1001"},
		{1, 0, sandbox.ResourceRequest{Pids: 31}, "pids 31: QEMU needs at least 32 host tasks (0: the default, 256)"},
	} {
		err := CheckRequest(tc.vcpus, tc.mem, tc.r)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckRequest(%d, %d, %+v) = %v, want ErrInvalid with %q", tc.vcpus, tc.mem, tc.r, err, tc.want)
		}
	}
	for _, tc := range []struct {
		vcpus, mem int
		r          sandbox.ResourceRequest
	}{
		{1, 0, sandbox.ResourceRequest{}},
		{1, MinMemoryMiB, sandbox.ResourceRequest{DiskMiB: 1, CPUQuotaPercent: 100, IOBytesPerSec: MinIOBytesPerSec, IOPS: MinIOPS, IOWeight: 100, Pids: 32}},
		{4, 4096, sandbox.ResourceRequest{CPUQuotaPercent: 400, IOWeight: 1000}},
	} {
		if err := CheckRequest(tc.vcpus, tc.mem, tc.r); err != nil {
			t.Errorf("CheckRequest(%d, %d, %+v) = %v", tc.vcpus, tc.mem, tc.r, err)
		}
	}
}

// removeWhenEmpty removes the groups it was given once they are empty,
// and only those: another domain's group of the same sandbox (listed in
// its record by then) stays. A group that stays busy is given up, with a
// log line, once the sandbox is final.
func TestRemoveWhenEmpty(t *testing.T) {
	root := t.TempDir()
	own, next := filepath.Join(root, "qemu-1-sb"), filepath.Join(root, "qemu-2-sb")
	for _, d := range []string{own, next} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	task := filepath.Join(own, "task") // a non-empty directory does not go, like a busy group
	if err := os.WriteFile(task, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	e := New(nil, slog.New(slog.NewTextHandler(&logs, nil)))
	done := make(chan struct{})
	go func() {
		e.removeWhenEmpty("sb", []string{own}, func() bool { return false }, time.Millisecond)
		close(done)
	}()
	time.Sleep(20 * time.Millisecond)
	if _, err := os.Stat(own); err != nil {
		t.Fatalf("the busy group went: %v", err)
	}
	os.Remove(task) // its QEMU left
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("removeWhenEmpty did not return after its group emptied")
	}
	if _, err := os.Stat(own); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("own group after it emptied: %v, want it removed", err)
	}
	if _, err := os.Stat(next); err != nil {
		t.Errorf("the next domain's group: %v, want it kept", err)
	}
	if logs.Len() != 0 {
		t.Errorf("logged %q", logs.String())
	}

	// Busy for good, and the sandbox final: one warning, then it stops.
	if err := os.WriteFile(filepath.Join(next, "task"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	e.removeWhenEmpty("sb", []string{next}, func() bool { return true }, time.Millisecond)
	if !strings.Contains(logs.String(), "cgroup of a stopped sandbox not removed") || !strings.Contains(logs.String(), next) {
		t.Errorf("logged %q, want the warning naming %s", logs.String(), next)
	}
}
