package client

import (
	"context"
	"net/http"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// SetTimeout makes the sandbox expire d from now (POST
// /v1/sandboxes/{id}/timeout; E2B's setTimeout) and returns it, with
// ExpiresAt the new expiry. d is rounded up to whole seconds. Errors: 400
// outside 1 s..api.MaxTimeoutSeconds, 404.
func (c *sandboxes) SetTimeout(ctx context.Context, ref string, d time.Duration) (api.Sandbox, error) {
	var sb api.Sandbox
	req := api.TimeoutRequest{TimeoutSeconds: int64((d + time.Second - 1) / time.Second)}
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "timeout"), req, &sb)
	return sb, err
}

// RestoreSnapshots restores req.Count sandboxes (0 means 1) from the
// snapshot ref concurrently and returns them, named req.Name-1 …
// req.Name-N when there are several (RestoreSnapshot's request and
// answer for one). All or nothing: on error none is left. Errors as
// RestoreSnapshot's; 429 capacity_exceeded when all of them do not fit.
func (c *snapshots) RestoreSnapshots(ctx context.Context, ref string, req api.RestoreRequest) ([]api.Sandbox, error) {
	if req.Count <= 1 {
		sb, err := c.RestoreSnapshot(ctx, ref, req)
		if err != nil {
			return nil, err
		}
		return []api.Sandbox{sb}, nil
	}
	var list api.SandboxList
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "snapshots", ref, "restore"), req, &list)
	return list.Sandboxes, err
}
