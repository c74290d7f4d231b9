package sandbox

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/image"
)

func TestMemoryHardLimitMiB(t *testing.T) {
	for _, tc := range []struct {
		guest int64
		tcg   bool
		want  int64
	}{
		{512, true, 512 + 192 + 128 + 256},
		{512, false, 512 + 192 + 128},
		{4096, false, 4096 + 192 + 1024},
	} {
		got := MemoryHardLimitMiB(tc.guest, tc.tcg)
		if got != tc.want {
			t.Errorf("MemoryHardLimitMiB(%d, %v) = %d, want %d", tc.guest, tc.tcg, got, tc.want)
		}
		// A guest that touches all its RAM stays under the 80 % warning.
		if tc.guest*100/got >= 80 {
			t.Errorf("guest RAM is %d%% of the limit %d", tc.guest*100/got, got)
		}
	}
}

func TestResolveResources(t *testing.T) {
	img := &image.Image{Manifest: image.Manifest{Resources: image.Resources{VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096, CPUQuotaPercent: 150}}}
	v, m, r := ResolveResources(img, 0, 0, ResourceRequest{})
	if v != 2 || m != 1024 || r != (ResourceRequest{DiskMiB: 4096, CPUQuotaPercent: 150, Pids: DefaultPids}) {
		t.Errorf("image defaults: %d %d %+v", v, m, r)
	}
	v, m, r = ResolveResources(img, 1, 256, ResourceRequest{DiskMiB: 5000, CPUQuotaPercent: 20, IOPS: 5, Pids: 64})
	if v != 1 || m != 256 || r != (ResourceRequest{DiskMiB: 5000, CPUQuotaPercent: 20, IOPS: 5, Pids: 64}) {
		t.Errorf("overrides: %d %d %+v", v, m, r)
	}
}

func TestCheckResources(t *testing.T) {
	for _, r := range []ResourceRequest{
		{DiskMiB: -1}, {CPUQuotaPercent: 6401}, {IOBytesPerSec: -1}, {IOWeight: 99}, {IOWeight: 1001}, {Pids: 31},
	} {
		if err := checkResources(r); !errors.Is(err, ErrInvalid) {
			t.Errorf("checkResources(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if err := checkResources(ResourceRequest{DiskMiB: 1, CPUQuotaPercent: 50, IOWeight: 100, Pids: 32}); err != nil {
		t.Error(err)
	}
}
