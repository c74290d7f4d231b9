package apiserver

import (
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// watchFiles streams a watch's events as ndjson. The 200 goes out once the
// watch is in place, so a client holding the answer's headers knows that
// every change from now on is reported; an error before that is an
// ordinary error answer, after it one ERROR event.
func watchFiles(s *Server, w http.ResponseWriter, r *request) error {
	p, err := r.path()
	if err != nil {
		return err
	}
	recursive, err := queryBool(r.q, "recursive")
	if err != nil {
		return err
	}
	ctx, cancel := s.untilDrain(r.Context())
	defer cancel()
	st := newNDJSONStream(w)
	err = s.backend.(backend.WatchBackend).Watch(ctx, r.id, p, recursive, st.start, func(ev api.WatchEvent) error { return st.send(ev) })
	return s.endFollow(r, st, "/v1/sandboxes/{id}/files/watch", err, func(e *api.Error) any {
		return api.WatchEvent{Op: api.WatchError, Error: e}
	})
}
