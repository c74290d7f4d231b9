package apiserver

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// snapshots returns the Backend's backend.SnapshotBackend (needs checked it).
func (s *Server) snapshots() backend.SnapshotBackend { return s.backend.(backend.SnapshotBackend) }

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
