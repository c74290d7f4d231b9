package apiserver

import (
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// lifecycle returns the Backend's backend.LifecycleBackend (needs checked it).
func (s *Server) lifecycle() backend.LifecycleBackend { return s.backend.(backend.LifecycleBackend) }

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
		lb, ok := s.backend.(backend.LifecycleBackend)
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
