package backendtest

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// ForkFns are the functions of the fake's timeout and restore-of-several
// methods; nil ones answer fixtures.
type ForkFns struct {
	TimeoutFn     func(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error)
	RestoreManyFn func(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error)
}

var (
	_ backend.TimeoutBackend = (*Fake)(nil)
	_ backend.ForkBackend    = (*Fake)(nil)
)

// SetTimeout implements backend.TimeoutBackend: the fixture sandbox
// expiring TimeoutSeconds after Epoch.
func (b *Fake) SetTimeout(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error) {
	b.record("SetTimeout", ref)
	if b.Fork.TimeoutFn != nil {
		return b.Fork.TimeoutFn(ctx, ref, req)
	}
	s := Sandbox(ref)
	exp := Epoch.Add(time.Duration(req.TimeoutSeconds) * time.Second)
	s.Limits.TTLSeconds, s.ExpiresAt = req.TimeoutSeconds, &exp
	return s, nil
}

// RestoreSnapshots implements backend.ForkBackend: Count fixture
// sandboxes named NAME-i with IDs 000000000001….
func (b *Fake) RestoreSnapshots(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error) {
	b.record("RestoreSnapshots", name)
	if b.Fork.RestoreManyFn != nil {
		return b.Fork.RestoreManyFn(ctx, name, req)
	}
	out := make([]api.Sandbox, req.Count)
	for i := range out {
		out[i] = Sandbox(fmt.Sprintf("%012x", i+1))
		out[i].Name = ""
		if req.Name != "" {
			out[i].Name = api.ForkName(req.Name, i+1)
		}
	}
	return out, nil
}
