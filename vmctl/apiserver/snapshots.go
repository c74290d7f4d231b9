package apiserver

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
)

// SnapshotBackend is the part of a Backend that handles snapshots; a
// Backend without it answers the snapshot routes 501 not_implemented.
// Snapshot references (name) are a snapshot name or ID, syntax-checked.
type SnapshotBackend interface {
	// SaveSnapshot checkpoints the running sandbox ref live. Errors: 404
	// not_found, 409 sandbox_not_running, 409 name_taken, 507
	// insufficient_storage (the sandbox keeps running).
	SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error)
	// ListSnapshots lists snapshots oldest first; with sandbox != "" those
	// of that sandbox (ID or name; a removed sandbox by ID).
	ListSnapshots(ctx context.Context, sandbox string) ([]api.Snapshot, error)
	// GetSnapshot returns one snapshot. Errors: 404 not_found.
	GetSnapshot(ctx context.Context, name string) (api.Snapshot, error)
	// DeleteSnapshot removes a snapshot. Errors: 404 not_found.
	DeleteSnapshot(ctx context.Context, name string) error
	// RestoreSnapshot starts a new sandbox from the snapshot. Errors: 404,
	// 409 name_taken, 422 snapshot_unusable (image changed, file gone or
	// corrupt), 429 capacity_exceeded, 507 insufficient_storage.
	RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error)
}

// snapshots returns the Backend's SnapshotBackend (needs checked it).
func (s *Server) snapshots() SnapshotBackend { return s.backend.(SnapshotBackend) }

func snapshotLocation(_ *request, snap api.Snapshot) string { return "/v1/snapshots/" + snap.Name }

func saveSnapshot(s *Server, r *request, req api.SaveSnapshotRequest) (api.Snapshot, error) {
	return s.snapshots().SaveSnapshot(r.Context(), r.id, req)
}

func listSnapshots(s *Server, r *request) (api.SnapshotList, error) {
	sb := r.q.Get("sandbox")
	if sb != "" {
		if err := api.CheckRef(sb); err != nil {
			return api.SnapshotList{}, err
		}
	}
	list, err := s.snapshots().ListSnapshots(r.Context(), sb)
	return api.SnapshotList{Snapshots: nonNil(list)}, err
}

func getSnapshot(s *Server, r *request) (api.Snapshot, error) {
	return s.snapshots().GetSnapshot(r.Context(), r.name)
}

func deleteSnapshot(s *Server, r *request) error {
	return s.snapshots().DeleteSnapshot(r.Context(), r.name)
}
