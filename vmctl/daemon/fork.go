package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

var (
	_ backend.TimeoutBackend = (*Daemon)(nil)
	_ backend.ForkBackend    = (*Daemon)(nil)
)

// SetTimeout implements backend.TimeoutBackend: the sandbox expires
// req.TimeoutSeconds from now (sandbox.SetTimeout); the reaper removes it
// then, as for any TTL.
func (s *lifecycleService) SetTimeout(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error) {
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	args := map[string]any{"timeout_seconds": req.TimeoutSeconds}
	exp, err := sb.SetTimeout(time.Duration(req.TimeoutSeconds)*time.Second, start)
	if err == nil {
		args["expires_at"] = exp.UTC()
	}
	s.auditAction(ctx, sb.ID, audit.ActionTimeout, args, start, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	return s.view(sb), nil
}

// RestoreSnapshots implements backend.ForkBackend: req.Count restores
// of one snapshot, started concurrently, named NAME-1 … NAME-N. They are
// admitted together first (429 with the numbers for all of them, before
// anything is made); then each is an ordinary restore (its own audit
// entry and identity). All or nothing: when one fails, the others are
// cancelled, those made are removed, and the first failure is answered.
func (s *snapshotService) RestoreSnapshots(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error) {
	n := req.Count
	if n < 1 {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("count %d: restore at least one sandbox", n))
	}
	if err := s.adm.admitting(); err != nil {
		return nil, err
	}
	rec, err := s.snapshot(ctx, name) // tenants.go
	if err != nil {
		return nil, err
	}
	if err := s.adm.admitCount(s.mgr.Resources(), n, rec.VCPUs, rec.MemoryMiB); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]api.Sandbox, n)
	errs := make([]error, n)
	var first sync.Once
	var firstErr error
	var wg sync.WaitGroup
	for i := range n {
		r := req
		r.Count = 0
		if req.Name != "" {
			r.Name = api.ForkName(req.Name, i+1)
		}
		wg.Go(func() {
			out[i], errs[i] = s.RestoreSnapshot(ctx, name, r)
			if errs[i] != nil {
				first.Do(func() { firstErr = errs[i]; cancel() })
			}
		})
	}
	wg.Wait()
	if firstErr == nil {
		return out, nil
	}
	// All or nothing: remove the ones made.
	var undo []error
	for i, v := range out {
		if errs[i] != nil || v.ID == "" {
			continue
		}
		if err := s.removeFork(context.WithoutCancel(ctx), v.ID, n); err != nil {
			undo = append(undo, err)
		}
	}
	if len(undo) > 0 {
		return nil, errors.Join(append([]error{firstErr}, undo...)...)
	}
	return nil, firstErr
}

// removeFork removes sandbox id, made by a restore of n that failed
// elsewhere, and audits why.
func (s *snapshotService) removeFork(ctx context.Context, id string, n int) error {
	start := time.Now()
	sb, err := s.mgr.Get(id)
	if err != nil {
		return nil // already gone
	}
	err = s.mgr.Remove(ctx, sb, true)
	s.auditAction(ctx, id, audit.ActionRemove, map[string]any{"force": true, "reason": fmt.Sprintf("another sandbox of a restore of %d failed", n)}, start, err)
	if err != nil {
		return fmt.Errorf("remove sandbox %s of the failed restore: %w", id, err)
	}
	if err := s.store.DeleteExecs(id); err != nil {
		s.log.Warn("delete exec history", "sandbox", id, "err", err)
	}
	return nil
}

// admitCount is admission control for n sandboxes of vcpus and memoryMiB
// each at once: refused with 429 and the numbers unless all of them fit
// the capacity besides what used holds.
func (a *admission) admitCount(used sandbox.Resources, n, vcpus, memoryMiB int) error {
	mem, cpu := n*memoryMiB, n*vcpus
	if used.UsedMemoryMiB+mem <= a.memoryMiB && used.UsedVCPUs+cpu <= a.vcpus {
		return nil
	}
	msg := fmt.Sprintf("host capacity exceeded: %d sandboxes of %d MiB and %d vCPUs need %d MiB and %d vCPUs; %d of %d MiB and %d of %d vCPUs are committed: restore fewer, %s",
		n, memoryMiB, vcpus, mem, cpu, used.UsedMemoryMiB, a.memoryMiB, used.UsedVCPUs, a.vcpus, a.hint)
	a.refused.Inc()
	return errdefs.WithDetails(errCapacity.WithMessage(msg), map[string]any{
		"count": n, "requested_memory_mib": mem, "requested_vcpus": cpu,
		"used_memory_mib": used.UsedMemoryMiB, "used_vcpus": used.UsedVCPUs,
		"capacity_memory_mib": a.memoryMiB, "capacity_vcpus": a.vcpus,
	})
}
