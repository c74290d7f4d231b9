package daemon

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestAdmit(t *testing.T) {
	d := newAdmission(Config{CapacityMemoryMiB: 1024, CapacityVCPUs: 2}, newMetrics(nil, nil).admissionRefused)
	if err := d.admit(sandbox.Resources{VCPUs: 1, MemoryMiB: 512, UsedVCPUs: 1, UsedMemoryMiB: 512}); err != nil {
		t.Fatalf("exactly full must be admitted: %v", err)
	}
	err := d.admit(sandbox.Resources{VCPUs: 1, MemoryMiB: 513, UsedVCPUs: 0, UsedMemoryMiB: 512})
	ae := api.ErrorFrom(err)
	if ae == nil || ae.Status != http.StatusTooManyRequests || ae.Code != api.CodeCapacity {
		t.Fatalf("over memory: %v", err)
	}
	if ae.Details["capacity_memory_mib"] != 1024 || ae.Details["used_memory_mib"] != 512 || ae.Details["requested_memory_mib"] != 513 {
		t.Fatalf("details %v", ae.Details)
	}
	if err := d.admit(sandbox.Resources{VCPUs: 2, MemoryMiB: 1, UsedVCPUs: 1}); err == nil {
		t.Fatal("over vCPUs admitted")
	}
}

func TestApplyCeilings(t *testing.T) {
	img := &image.Image{Manifest: image.Manifest{Resources: image.Resources{VCPUs: 1, MemoryMiB: 512, DiskMiB: 4096}}}
	d := &admission{ceilings: Ceilings{VCPUs: 2, MemoryMiB: 4096, DiskMiB: 3072, CPUQuotaPercent: 100, IOBps: 1 << 20, IOPS: 100, Pids: 512}}
	for _, tc := range []struct {
		req  api.CreateSandboxRequest
		want string
	}{
		{api.CreateSandboxRequest{MemoryMiB: 8192}, "memory 8192 MiB is above the daemon's ceiling of 4096 MiB (--max-memory): ask for at most 4096 MiB"},
		{api.CreateSandboxRequest{VCPUs: 3}, "vcpus 3 is above the daemon's ceiling of 2 (--max-vcpus)"},
		{api.CreateSandboxRequest{CPUQuotaPercent: 101}, "cpu quota 101% is above the daemon's ceiling of 100% (--max-cpu-quota)"},
		{api.CreateSandboxRequest{IOBps: 2 << 20}, "io 2097152 bytes/s is above the daemon's ceiling of 1048576 bytes/s (--max-io-bps)"},
		{api.CreateSandboxRequest{IOPS: 101}, "iops 101 ops/s is above the daemon's ceiling of 100 ops/s (--max-iops)"},
		{api.CreateSandboxRequest{Pids: 513}, "pids 513 is above the daemon's ceiling of 512 (--max-pids)"},
		// The image's default disk (4096 MiB) is above the ceiling too.
		{api.CreateSandboxRequest{}, "disk 4096 MiB is above the daemon's ceiling of 3072 MiB (--max-disk)"},
	} {
		err := d.applyCeilings(context.Background(), img, &tc.req)
		ae := api.ErrorFrom(err)
		if ae == nil || ae.Status != http.StatusUnprocessableEntity || !strings.HasPrefix(ae.Message, tc.want) {
			t.Errorf("%+v: %v, want 422 %q", tc.req, err, tc.want)
		}
	}
	// Within the ceilings: unset capped values get the ceiling.
	req := api.CreateSandboxRequest{DiskMiB: 3072}
	if err := d.applyCeilings(context.Background(), img, &req); err != nil {
		t.Fatal(err)
	}
	if req.CPUQuotaPercent != 100 || req.IOBps != 1<<20 || req.IOPS != 100 || req.Pids != 256 {
		t.Errorf("defaults from the ceilings: %+v", req)
	}
	// A quota ceiling above what the sandbox's vCPUs can use fills in
	// only 100 % per vCPU (more would be refused as having no effect).
	d.ceilings = Ceilings{CPUQuotaPercent: 300}
	for vcpus, want := range map[int]int{1: 100, 2: 200, 4: 300} {
		req := api.CreateSandboxRequest{VCPUs: vcpus}
		if err := d.applyCeilings(context.Background(), img, &req); err != nil || req.CPUQuotaPercent != want {
			t.Errorf("%d vCPUs under a 300%% ceiling: quota %d, %v; want %d", vcpus, req.CPUQuotaPercent, err, want)
		}
	}
}

// A clone whose template RAM live clones already count commits only its
// private part; refused, the message says what is shared.
func TestAdmitClone(t *testing.T) {
	d := newAdmission(Config{CapacityMemoryMiB: 1024, CapacityVCPUs: 8}, newMetrics(nil, nil).admissionRefused)
	if err := d.admit(sandbox.Resources{VCPUs: 1, MemoryMiB: 512, SharedMiB: 384, UsedVCPUs: 1, UsedMemoryMiB: 896}); err != nil {
		t.Fatalf("a clone needing 128 MiB in the 128 MiB left: %v", err)
	}
	err := d.admit(sandbox.Resources{VCPUs: 1, MemoryMiB: 512, SharedMiB: 383, UsedVCPUs: 1, UsedMemoryMiB: 896})
	ae := api.ErrorFrom(err)
	if ae == nil || ae.Status != http.StatusTooManyRequests || ae.Details["requested_memory_mib"] != 129 {
		t.Fatalf("clone over capacity: %v %+v", err, ae)
	}
	if want := "the sandbox needs 129 MiB (383 MiB of its 512 MiB guest RAM shared with live clones of its memory template)"; !strings.Contains(ae.Message, want) {
		t.Errorf("message %q lacks %q", ae.Message, want)
	}
}
