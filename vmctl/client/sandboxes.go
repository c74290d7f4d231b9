package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
)

// Info describes the daemon: version, capacity, sandboxes by state
// (GET /v1/info).
func (c *Client) Info(ctx context.Context) (api.Info, error) {
	var info api.Info
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "info"), nil, &info)
	return info, err
}

// CreateSandbox boots a sandbox and returns it running (POST
// /v1/sandboxes). Errors (*api.Error): 400 invalid request, 409
// name_taken, 422 invalid_image, 429 capacity_exceeded (Details hold the
// numbers), 500 boot_failed, 503 unavailable.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes"), req, &sb)
	return sb, err
}

// ListSandboxes returns the sandboxes carrying all of labels (nil: any)
// and, if state is not "", in that state, oldest first.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
	q := url.Values{}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Add("label", k+"="+labels[k])
	}
	if state != "" {
		q.Set("state", state)
	}
	return c.ListSandboxesQuery(ctx, q)
}

// ListSandboxesQuery is ListSandboxes with GET /v1/sandboxes's query given
// as is: "label" (KEY=VALUE, repeatable) and "state", as the API takes
// them; for a caller that passes on another request's query (a cluster
// node asking another, vmctl/clusterproxy). A parameter the API does not
// take is its 400 invalid_argument.
func (c *Client) ListSandboxesQuery(ctx context.Context, q url.Values) ([]api.Sandbox, error) {
	var list api.SandboxList
	err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes"), nil, &list)
	return list.Sandboxes, err
}

// GetSandbox returns the sandbox with ID or name ref. Errors: 404.
func (c *Client) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", ref), nil, &sb)
	return sb, err
}

// StopSandbox stops the sandbox's VM, keeping its record and logs, and
// returns it stopped.
func (c *Client) StopSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "stop"), nil, &sb)
	return sb, err
}

// DeleteSandbox removes the sandbox; a running one needs force (else 409
// sandbox_running).
func (c *Client) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return c.call(ctx, http.MethodDelete, c.endpoint(q, "v1", "sandboxes", ref), nil, nil)
}

// Console copies the sandbox's serial console log to w: the last tail
// bytes when tail > 0, else all of it.
func (c *Client) Console(ctx context.Context, ref string, tail int64, w io.Writer) error {
	var q url.Values
	if tail > 0 {
		q = url.Values{"tail": {strconv.FormatInt(tail, 10)}}
	}
	resp, err := c.do(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes", ref, "console"), "", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("reading the console log: %w", err)
	}
	return nil
}

// Audit calls emit with each audit entry, oldest first: of sandbox ref
// (an ID also finds a removed sandbox's entries), or of all when ref is
// "". An error from emit stops the stream and is returned.
func (c *Client) Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error {
	u := c.endpoint(nil, "v1", "audit")
	if ref != "" {
		u = c.endpoint(nil, "v1", "sandboxes", ref, "audit")
	}
	return stream(ctx, c, u, emit)
}

// Events calls emit with each sandbox event as it happens until ctx is
// done (then it returns ctx's error), emit returns an error (returned), or
// the daemon ends the stream (it does when shutting down; nil).
func (c *Client) Events(ctx context.Context, emit func(api.Event) error) error {
	return stream(ctx, c, c.endpoint(nil, "v1", "events"), emit)
}

// stream GETs an ndjson stream of T and calls emit with each value. It
// returns nil at the stream's clean end, emit's error, ctx's error when
// ctx ends, or the read error of a cut or malformed stream.
func stream[T any](ctx context.Context, c *Client, u *url.URL, emit func(T) error) error {
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

// PauseSandbox pauses the running sandbox (POST /v1/sandboxes/{id}/pause):
// in memory, or with toDisk saved to disk with its QEMU ended. Errors: 404,
// 409 conflict (not running), 507 insufficient_storage.
func (c *Client) PauseSandbox(ctx context.Context, ref string, toDisk bool) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "pause"), api.PauseRequest{ToDisk: toDisk}, &sb)
	return sb, err
}

// Pause pauses the running sandbox as req says (POST
// /v1/sandboxes/{id}/pause): PauseSandbox with every option, e.g.
// EndTTL. Errors as PauseSandbox's.
func (c *Client) Pause(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "pause"), req, &sb)
	return sb, err
}

// ResumeSandbox lets the paused sandbox run again in place (POST
// /v1/sandboxes/{id}/resume). Errors: 404, 409 conflict (not paused), 422
// snapshot_unusable (its saved state does not load; it is failed), 429.
func (c *Client) ResumeSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "resume"), nil, &sb)
	return sb, err
}

// StartSandbox boots the stopped sandbox again on its kept disk (POST
// /v1/sandboxes/{id}/start). Errors: 404, 409 conflict (running or
// paused), 422, 429.
func (c *Client) StartSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "start"), nil, &sb)
	return sb, err
}
