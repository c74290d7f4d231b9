package daemon

import (
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

func TestAdmitCount(t *testing.T) {
	a := newAdmission(Config{CapacityMemoryMiB: 2048, CapacityVCPUs: 8}, newMetrics(nil, nil).admissionRefused)
	if err := a.admitCount(sandbox.Resources{UsedMemoryMiB: 512, UsedVCPUs: 2}, 3, 2, 512); err != nil {
		t.Fatalf("exactly full must be admitted: %v", err)
	}
	err := a.admitCount(sandbox.Resources{UsedMemoryMiB: 512}, 4, 1, 512)
	ae := api.ErrorFrom(err)
	if ae == nil || ae.Status != http.StatusTooManyRequests || ae.Code != api.CodeCapacity {
		t.Fatalf("over memory: %v", err)
	}
	if ae.Details["count"] != 4 || ae.Details["requested_memory_mib"] != 2048 || ae.Details["used_memory_mib"] != 512 {
		t.Fatalf("details %v", ae.Details)
	}
	if !strings.Contains(err.Error(), "4 sandboxes of 512 MiB and 1 vCPUs need 2048 MiB and 4 vCPUs; 512 of 2048 MiB") {
		t.Fatalf("message %q", err)
	}
}

func TestApplyNetCeiling(t *testing.T) {
	open := netpolicy.Policy{Mode: netpolicy.ModeOpen}
	a := &admission{ceilings: Ceilings{NetBps: 1 << 20}}
	req := api.CreateSandboxRequest{NetBps: 2 << 20}
	err := a.applyNetCeiling(&req, open)
	if ae := api.ErrorFrom(err); ae == nil || ae.Status != http.StatusUnprocessableEntity ||
		err.Error() != "net rate 2097152 bytes/s is above the daemon's ceiling of 1048576 bytes/s (--max-net-rate): ask for at most 1048576 bytes/s" {
		t.Fatalf("above the ceiling: %v", err)
	}
	req = api.CreateSandboxRequest{}
	if err := a.applyNetCeiling(&req, open); err != nil || req.NetBps != 1<<20 {
		t.Fatalf("unset with a network: %v, net_bps %d; want the ceiling", err, req.NetBps)
	}
	req = api.CreateSandboxRequest{}
	if err := a.applyNetCeiling(&req, netpolicy.Policy{Mode: netpolicy.ModeNone}); err != nil || req.NetBps != 0 {
		t.Fatalf("without a network: %v, net_bps %d; want none", err, req.NetBps)
	}
	if err := (&admission{}).applyNetCeiling(&api.CreateSandboxRequest{NetBps: 1 << 40}, open); err != nil {
		t.Fatalf("no ceiling: %v", err)
	}
}
