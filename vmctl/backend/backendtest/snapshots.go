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

// snapshotFake is the part of a Fake serving backend.SnapshotBackend from
// Snapshot (promoted: Fake.Snapshot) or fixtures; it records its calls in its
// own log, which Fake.Calls merges.
type snapshotFake struct {
	Snapshot SnapshotFns
	log      callLog
}

var _ backend.SnapshotBackend = (*Fake)(nil)

// SaveSnapshot implements backend.SnapshotBackend.
func (p *snapshotFake) SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
	p.log.record("SaveSnapshot", ref)
	if p.Snapshot.SaveFn != nil {
		return p.Snapshot.SaveFn(ctx, ref, req)
	}
	return Snapshot(req.Name), nil
}

// ListSnapshots implements backend.SnapshotBackend.
func (p *snapshotFake) ListSnapshots(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
	p.log.record("ListSnapshots", sandbox)
	if p.Snapshot.ListFn != nil {
		return p.Snapshot.ListFn(ctx, sandbox)
	}
	return []api.Snapshot{Snapshot("before")}, nil
}

// GetSnapshot implements backend.SnapshotBackend.
func (p *snapshotFake) GetSnapshot(ctx context.Context, name string) (api.Snapshot, error) {
	p.log.record("GetSnapshot", name)
	if p.Snapshot.GetFn != nil {
		return p.Snapshot.GetFn(ctx, name)
	}
	return Snapshot(name), nil
}

// DeleteSnapshot implements backend.SnapshotBackend.
func (p *snapshotFake) DeleteSnapshot(ctx context.Context, name string) error {
	p.log.record("DeleteSnapshot", name)
	if p.Snapshot.DeleteFn != nil {
		return p.Snapshot.DeleteFn(ctx, name)
	}
	return nil
}

// RestoreSnapshot implements backend.SnapshotBackend.
func (p *snapshotFake) RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
	p.log.record("RestoreSnapshot", name)
	if p.Snapshot.RestoreFn != nil {
		return p.Snapshot.RestoreFn(ctx, name, req)
	}
	s := Sandbox(SandboxID)
	s.Name = req.Name
	return s, nil
}
