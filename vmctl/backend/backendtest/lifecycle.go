package backendtest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// LifecycleFns are the functions of the fake's pause, resume and start
// methods (see Fake.Lifecycle); nil ones answer the fixture sandbox in
// the state the call leads to.
type LifecycleFns struct {
	PauseFn  func(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error)
	ResumeFn func(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error)
	StartFn  func(ctx context.Context, ref string) (api.Sandbox, error)
}

var _ backend.LifecycleBackend = (*Fake)(nil)

// PauseSandbox implements backend.LifecycleBackend.
func (b *Fake) PauseSandbox(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error) {
	b.record("PauseSandbox", ref)
	if b.Lifecycle.PauseFn != nil {
		return b.Lifecycle.PauseFn(ctx, ref, req)
	}
	sb := Sandbox(SandboxID)
	sb.State = api.StatePaused
	sb.Paused = &api.PauseInfo{ToDisk: req.ToDisk, PausedAt: Epoch}
	if req.ToDisk {
		sb.Paused.File, sb.Paused.Tag, sb.Paused.VMStateBytes, sb.Paused.DiskBytes = "/var/lib/agentbox/sandboxes/"+SandboxID+"/overlay.qcow2", "p0123456789ab", 90<<20, 95<<20
	}
	return sb, nil
}

// ResumeSandbox implements backend.LifecycleBackend.
func (b *Fake) ResumeSandbox(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error) {
	b.record("ResumeSandbox", ref)
	if b.Lifecycle.ResumeFn != nil {
		return b.Lifecycle.ResumeFn(ctx, ref, ifPaused)
	}
	return Sandbox(SandboxID), nil
}

// StartSandbox implements backend.LifecycleBackend.
func (b *Fake) StartSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	b.record("StartSandbox", ref)
	if b.Lifecycle.StartFn != nil {
		return b.Lifecycle.StartFn(ctx, ref)
	}
	return Sandbox(SandboxID), nil
}
