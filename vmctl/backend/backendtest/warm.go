package backendtest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// WarmKey is the key of the fixture warm template.
const WarmKey = "0123456789abcdef01234567"

// WarmTemplate returns a valid warm template fixture.
func WarmTemplate() api.WarmTemplate {
	return api.WarmTemplate{
		Key: WarmKey, Image: Snapshot("x").Image, DomainType: "qemu", VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048,
		SizeBytes: 300 << 20, CreatedAt: Epoch, BuildMs: 21000, LastUsedAt: Epoch, Pooled: 1,
	}
}

// WarmFns are the functions of the fake's warm methods (see
// Fake.Warm); nil ones answer fixtures.
type WarmFns struct {
	ListFn   func(ctx context.Context) ([]api.WarmTemplate, error)
	DeleteFn func(ctx context.Context, key string) error
}

var _ backend.WarmBackend = (*Fake)(nil)

// ListWarm implements backend.WarmBackend.
func (b *Fake) ListWarm(ctx context.Context) ([]api.WarmTemplate, error) {
	b.record("ListWarm", "")
	if b.Warm.ListFn != nil {
		return b.Warm.ListFn(ctx)
	}
	return []api.WarmTemplate{WarmTemplate()}, nil
}

// DeleteWarm implements backend.WarmBackend.
func (b *Fake) DeleteWarm(ctx context.Context, key string) error {
	b.record("DeleteWarm", key)
	if b.Warm.DeleteFn != nil {
		return b.Warm.DeleteFn(ctx, key)
	}
	return nil
}
