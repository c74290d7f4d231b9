package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
)

// sandboxes holds the Client's calls on sandboxes themselves: create,
// list, get, stop, start, pause, resume, delete, timeout, console log.
type sandboxes struct{ *transport }

// CreateSandbox boots a sandbox and returns it running (POST
// /v1/sandboxes). Errors (*api.Error): 400 invalid request, 409
// name_taken, 422 invalid_image, 429 capacity_exceeded (Details hold the
// numbers), 500 boot_failed, 503 unavailable.
func (c *sandboxes) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes"), req, &sb)
	return sb, err
}

// ListSandboxes returns the sandboxes carrying all of labels (nil: any)
// and, if state is not "", in that state, oldest first.
func (c *sandboxes) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
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
func (c *sandboxes) ListSandboxesQuery(ctx context.Context, q url.Values) ([]api.Sandbox, error) {
	var list api.SandboxList
	err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes"), nil, &list)
	return list.Sandboxes, err
}

// GetSandbox returns the sandbox with ID or name ref. Errors: 404.
func (c *sandboxes) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", ref), nil, &sb)
	return sb, err
}

// StopSandbox stops the sandbox's VM, keeping its record and logs, and
// returns it stopped.
func (c *sandboxes) StopSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "stop"), nil, &sb)
	return sb, err
}

// DeleteSandbox removes the sandbox; a running one needs force (else 409
// sandbox_running).
func (c *sandboxes) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	var q url.Values
	if force {
		q = url.Values{"force": {"true"}}
	}
	return c.call(ctx, http.MethodDelete, c.endpoint(q, "v1", "sandboxes", ref), nil, nil)
}

// Console copies the sandbox's serial console log to w: the last tail
// bytes when tail > 0, else all of it.
func (c *sandboxes) Console(ctx context.Context, ref string, tail int64, w io.Writer) error {
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

// PauseSandbox pauses the running sandbox (POST /v1/sandboxes/{id}/pause):
// in memory, or with toDisk saved to disk with its QEMU ended. Errors: 404,
// 409 conflict (not running), 507 insufficient_storage.
func (c *sandboxes) PauseSandbox(ctx context.Context, ref string, toDisk bool) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "pause"), api.PauseRequest{ToDisk: toDisk}, &sb)
	return sb, err
}

// Pause pauses the running sandbox as req says (POST
// /v1/sandboxes/{id}/pause): PauseSandbox with every option, e.g.
// EndTTL. Errors as PauseSandbox's.
func (c *sandboxes) Pause(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "pause"), req, &sb)
	return sb, err
}

// ResumeSandbox lets the paused sandbox run again in place (POST
// /v1/sandboxes/{id}/resume). Errors: 404, 409 conflict (not paused), 422
// snapshot_unusable (its saved state does not load; it is failed), 429.
func (c *sandboxes) ResumeSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "resume"), nil, &sb)
	return sb, err
}

// StartSandbox boots the stopped sandbox again on its kept disk (POST
// /v1/sandboxes/{id}/start). Errors: 404, 409 conflict (running or
// paused), 422, 429.
func (c *sandboxes) StartSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "start"), nil, &sb)
	return sb, err
}
