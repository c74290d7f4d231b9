package apiserver

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// WatchBackend is the part of a Backend that watches files in sandboxes;
// a Backend without it answers the watch route 501 not_implemented.
type WatchBackend interface {
	// Watch watches path (recursive: the directories below it too) in the
	// sandbox: ready is called once the guest has the watch in place,
	// before any event, then emit for each event, until ctx ends or the
	// watched path itself went away (after its REMOVE or RENAME event):
	// both return nil. Errors before ready: 404 not_found (no such
	// sandbox or path), 409 sandbox_not_running; after it: 409
	// sandbox_not_running (stopped meanwhile), 503 guest_died, or
	// emit's and ready's own errors.
	Watch(ctx context.Context, ref, path string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error
}

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
	err = s.backend.(WatchBackend).Watch(ctx, r.id, p, recursive, st.start, func(ev api.WatchEvent) error { return st.send(ev) })
	return s.endFollow(r, st, "/v1/sandboxes/{id}/files/watch", err, func(e *api.Error) any {
		return api.WatchEvent{Op: api.WatchError, Error: e}
	})
}
