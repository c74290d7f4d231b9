package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// daemon holds the Client's calls about the daemon as a whole and its
// cluster: its info, the audit log, the event stream, the nodes.
type daemon struct{ *transport }

// Info describes the daemon: version, capacity, sandboxes by state
// (GET /v1/info).
func (c *daemon) Info(ctx context.Context) (api.Info, error) {
	var info api.Info
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "info"), nil, &info)
	return info, err
}

// Audit calls emit with each audit entry, oldest first: of sandbox ref
// (an ID also finds a removed sandbox's entries), or of all when ref is
// "". An error from emit stops the stream and is returned.
func (c *daemon) Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error {
	u := c.endpoint(nil, "v1", "audit")
	if ref != "" {
		u = c.endpoint(nil, "v1", "sandboxes", ref, "audit")
	}
	return stream(ctx, c.transport, u, emit)
}

// Events calls emit with each sandbox event as it happens until ctx is
// done (then it returns ctx's error), emit returns an error (returned), or
// the daemon ends the stream (it does when shutting down; nil).
func (c *daemon) Events(ctx context.Context, emit func(api.Event) error) error {
	return stream(ctx, c.transport, c.endpoint(nil, "v1", "events"), emit)
}

// stream GETs an ndjson stream of T and calls emit with each value. It
// returns nil at the stream's clean end, emit's error, ctx's error when
// ctx ends, or the read error of a cut or malformed stream.
func stream[T any](ctx context.Context, c *transport, u *url.URL, emit func(T) error) error {
	resp, err := c.do(ctx, http.MethodGet, u, "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkType(resp, api.ContentTypeNDJSON); err != nil {
		return err
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var v T
		if err := dec.Decode(&v); err != nil {
			if err == io.EOF {
				return nil
			}
			return streamReadError(ctx, u.Path, err)
		}
		if err := emit(v); err != nil {
			return err
		}
	}
}

// streamReadError words an error while reading a stream.
func streamReadError(ctx context.Context, path string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("reading the answer stream of %s: %w (the daemon cut it or sent a malformed line; see its log)", path, err)
}
