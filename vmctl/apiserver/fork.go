package apiserver

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TimeoutBackend is the part of a Backend that sets a sandbox's timeout;
// a Backend without it answers the route 501 not_implemented.
type TimeoutBackend interface {
	// SetTimeout makes the sandbox ref expire req.TimeoutSeconds from now
	// and returns it (expires_at shows the new expiry). Errors: 404
	// not_found.
	SetTimeout(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error)
}

// ForkBackend is the part of a SnapshotBackend that restores several
// sandboxes from one snapshot at once (a restore request with count > 1);
// a Backend without it answers such requests 501 not_implemented.
type ForkBackend interface {
	// RestoreSnapshots restores req.Count (> 1) sandboxes from the
	// snapshot concurrently, named req.Name-1 … req.Name-N, and returns
	// them in that order. All or nothing: on error none is left. Errors
	// as RestoreSnapshot's (429 capacity_exceeded when all of them do not
	// fit, before any is made).
	RestoreSnapshots(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error)
}

func setTimeout(s *Server, r *request, req api.TimeoutRequest) (api.Sandbox, error) {
	return s.backend.(TimeoutBackend).SetTimeout(r.Context(), r.id, req)
}

// restoreSnapshot answers a restore: 201 with the Sandbox and its
// Location for one, 201 with a SandboxList (and no Location) for count
// > 1.
func restoreSnapshot(s *Server, w http.ResponseWriter, r *request) error {
	var req api.RestoreRequest
	if err := decodeJSON(r.Request, &req); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return err
	}
	if req.Count <= 1 {
		sb, err := s.snapshots().RestoreSnapshot(r.Context(), r.name, req)
		if err != nil {
			return err
		}
		w.Header().Set("Location", sandboxLocation(r, sb))
		return writeJSON(w, http.StatusCreated, sb)
	}
	fb, ok := s.backend.(ForkBackend)
	if !ok {
		return api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon does not restore several sandboxes at once: restore them one by one")
	}
	list, err := fb.RestoreSnapshots(r.Context(), r.name, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.SandboxList{Sandboxes: nonNil(list)})
}
