package apiserver

import (
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

func setTimeout(s *Server, r *request, req api.TimeoutRequest) (api.Sandbox, error) {
	return s.backend.(backend.TimeoutBackend).SetTimeout(r.Context(), r.id, req)
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
	fb, ok := s.backend.(backend.ForkBackend)
	if !ok {
		return api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon does not restore several sandboxes at once: restore them one by one")
	}
	list, err := fb.RestoreSnapshots(r.Context(), r.name, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusCreated, api.SandboxList{Sandboxes: nonNil(list)})
}
