package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
)

// Watch watches guestPath in sandbox ref (recursive: the directories below
// it too, including new ones) and calls emit with each change as the guest
// reports it (see api.WatchEvent). ready, if not nil, is called once the
// watch is in place, before any event: every change made after it was
// called is reported.
//
// It returns nil when the stream ended after the watched path's own REMOVE
// or RENAME, ctx's error when ctx ends (the way to stop watching), emit's
// error, or the *api.Error of the stream's ERROR event (409
// sandbox_not_running when the sandbox stopped, 503 guest_died). Errors
// before ready: 404 not_found (no such sandbox, or no such path in it),
// 409 sandbox_not_running, 501 not_implemented.
func (c *files) Watch(ctx context.Context, ref, guestPath string, recursive bool, ready func(), emit func(api.WatchEvent) error) error {
	q := url.Values{"path": {guestPath}}
	if recursive {
		q.Set("recursive", "true")
	}
	u := c.endpoint(q, "v1", "sandboxes", ref, "files", "watch")
	resp, err := c.do(ctx, http.MethodGet, u, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkType(resp, api.ContentTypeNDJSON); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				return nil
			}
			return streamReadError(ctx, u.Path, err)
		}
		if ev.Op == api.WatchError {
			return streamError(ev.Error, u.Path)
		}
		if err := emit(ev); err != nil {
			return err
		}
	}
}
