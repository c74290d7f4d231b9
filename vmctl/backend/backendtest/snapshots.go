package backendtest

import (
	"context"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// SnapshotID is the ID of the fixture snapshot.
const SnapshotID = "ba9876543210"

// Snapshot returns a valid snapshot fixture with the given name.
func Snapshot(name string) api.Snapshot {
	return api.Snapshot{
		ID: SnapshotID, Name: name, Sandbox: SandboxID, SandboxName: "work1",
		Image: api.ImageRef{Name: "debian", Digest: "sha256:" + fmt.Sprintf("%064x", 1), Dir: "/images/debian"},
		Accel: "tcg", Machine: "pc", VCPUs: 2, MemoryMiB: 512, Limits: api.Limits{TTLSeconds: 3600},
		CreatedAt: Epoch, SaveMs: 900, VMStateBytes: 120 << 20, DiskBytes: 130 << 20,
	}
}

// SnapshotFns are the functions of the fake's snapshot methods (see
// Fake.Snapshot); nil ones answer fixtures.
type SnapshotFns struct {
	SaveFn    func(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error)
	ListFn    func(ctx context.Context, sandbox string) ([]api.Snapshot, error)
	GetFn     func(ctx context.Context, name string) (api.Snapshot, error)
	DeleteFn  func(ctx context.Context, name string) error
	RestoreFn func(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error)
}

var _ backend.SnapshotBackend = (*Fake)(nil)

// SaveSnapshot implements backend.SnapshotBackend.
func (b *Fake) SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
	b.record("SaveSnapshot", ref)
	if b.Snapshot.SaveFn != nil {
		return b.Snapshot.SaveFn(ctx, ref, req)
	}
	return Snapshot(req.Name), nil
}

// ListSnapshots implements backend.SnapshotBackend.
func (b *Fake) ListSnapshots(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
	b.record("ListSnapshots", sandbox)
	if b.Snapshot.ListFn != nil {
		return b.Snapshot.ListFn(ctx, sandbox)
	}
	return []api.Snapshot{Snapshot("before")}, nil
}

// GetSnapshot implements backend.SnapshotBackend.
func (b *Fake) GetSnapshot(ctx context.Context, name string) (api.Snapshot, error) {
	b.record("GetSnapshot", name)
	if b.Snapshot.GetFn != nil {
		return b.Snapshot.GetFn(ctx, name)
	}
	return Snapshot(name), nil
}

// DeleteSnapshot implements backend.SnapshotBackend.
func (b *Fake) DeleteSnapshot(ctx context.Context, name string) error {
	b.record("DeleteSnapshot", name)
	if b.Snapshot.DeleteFn != nil {
		return b.Snapshot.DeleteFn(ctx, name)
	}
	return nil
}

// RestoreSnapshot implements backend.SnapshotBackend.
func (b *Fake) RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
	b.record("RestoreSnapshot", name)
	if b.Snapshot.RestoreFn != nil {
		return b.Snapshot.RestoreFn(ctx, name, req)
	}
	s := Sandbox(SandboxID)
	s.Name = req.Name
	return s, nil
}
