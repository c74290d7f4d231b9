package apiserver

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
)

// LifecycleBackend is the part of a Backend that pauses, resumes and
// starts sandboxes again; a Backend without it answers those routes (and
// ?resume=true) 501 not_implemented.
type LifecycleBackend interface {
	// PauseSandbox pauses a running sandbox, in memory or to disk.
	// Errors: 404, 409 conflict (not running: the message says what to
	// do), 507 insufficient_storage (to disk; it keeps running).
	PauseSandbox(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error)
	// ResumeSandbox lets a paused sandbox run again in place. With
	// ifPaused a sandbox that is not paused is returned as it is (the
	// ?resume=true of exec, file and process calls). Errors: 404, 409
	// conflict (not paused), 422 snapshot_unusable (its saved state does
	// not load; the sandbox is failed), 429 capacity_exceeded.
	ResumeSandbox(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error)
	// StartSandbox boots a stopped (or failed) sandbox again on its kept
	// disk. Errors: 404, 409 conflict (running or paused), 422
	// invalid_image (its image cannot be loaded) or invalid_argument (its
	// disk is gone, or its image changed), 429 capacity_exceeded, 500
	// boot_failed.
	StartSandbox(ctx context.Context, ref string) (api.Sandbox, error)
}

// lifecycle returns the Backend's LifecycleBackend (needs checked it).
func (s *Server) lifecycle() LifecycleBackend { return s.backend.(LifecycleBackend) }

func pauseSandbox(s *Server, r *request, req api.PauseRequest) (api.Sandbox, error) {
	return s.lifecycle().PauseSandbox(r.Context(), r.id, req)
}

func resumeSandbox(s *Server, r *request) (api.Sandbox, error) {
	return s.lifecycle().ResumeSandbox(r.Context(), r.id, false)
}

func startSandbox(s *Server, r *request) (api.Sandbox, error) {
	return s.lifecycle().StartSandbox(r.Context(), r.id)
}

// resumable wraps the handler of a route that needs a running sandbox
// ({id}): with ?resume=true a paused sandbox is resumed first, as E2B's
// connect does; without, the Backend answers a paused sandbox 409 with
// that hint.
func resumable(h handler) handler {
	return func(s *Server, w http.ResponseWriter, hr *http.Request, q url.Values) error {
		resume, err := queryBool(q, api.ResumeQuery)
		if err != nil || !resume {
			if err != nil {
				return err
			}
			return h(s, w, hr, q)
		}
		lb, ok := s.backend.(LifecycleBackend)
		if !ok {
			return api.Errorf(http.StatusNotImplemented, api.CodeNotImplemented, "this daemon cannot resume sandboxes: drop ?resume=true")
		}
		id := hr.PathValue("id")
		if err := api.CheckRef(id); err != nil {
			return err
		}
		if _, err := lb.ResumeSandbox(hr.Context(), id, true); err != nil {
			return err
		}
		return h(s, w, hr, q)
	}
}
