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

// warmFake is the part of a Fake serving backend.WarmBackend from
// Warm (promoted: Fake.Warm) or fixtures; it records its calls in its
// own log, which Fake.Calls merges.
type warmFake struct {
	Warm WarmFns
	log  callLog
}

var _ backend.WarmBackend = (*Fake)(nil)

// ListWarm implements backend.WarmBackend.
func (p *warmFake) ListWarm(ctx context.Context) ([]api.WarmTemplate, error) {
	p.log.record("ListWarm", "")
	if p.Warm.ListFn != nil {
		return p.Warm.ListFn(ctx)
	}
	return []api.WarmTemplate{WarmTemplate()}, nil
}

// DeleteWarm implements backend.WarmBackend.
func (p *warmFake) DeleteWarm(ctx context.Context, key string) error {
	p.log.record("DeleteWarm", key)
	if p.Warm.DeleteFn != nil {
		return p.Warm.DeleteFn(ctx, key)
	}
	return nil
}
