package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/agentbox/agentbox/vmctl/api"
)

// snapshots holds the Client's calls on snapshots: save, list, get,
// delete, restore.
type snapshots struct{ *transport }

// SaveSnapshot checkpoints the running sandbox ref (memory, devices, disk)
// under name; the sandbox keeps running (POST
// /v1/sandboxes/{id}/snapshots). Errors (*api.Error): 404, 409
// sandbox_not_running or name_taken, 507 insufficient_storage (the host's
// disk is full; the sandbox keeps running), 501 not_implemented.
func (c *snapshots) SaveSnapshot(ctx context.Context, ref, name string) (api.Snapshot, error) {
	var s api.Snapshot
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "snapshots"), api.SaveSnapshotRequest{Name: name}, &s)
	return s, err
}

// ListSnapshots returns the snapshots, oldest first; with sandbox != ""
// only those of that sandbox (ID or name; a removed sandbox by ID).
func (c *snapshots) ListSnapshots(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
	var q url.Values
	if sandbox != "" {
		q = url.Values{"sandbox": {sandbox}}
	}
	var list api.SnapshotList
	err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "snapshots"), nil, &list)
	return list.Snapshots, err
}

// GetSnapshot returns the snapshot with name or ID ref. Errors: 404.
func (c *snapshots) GetSnapshot(ctx context.Context, ref string) (api.Snapshot, error) {
	var s api.Snapshot
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "snapshots", ref), nil, &s)
	return s, err
}

// DeleteSnapshot removes the snapshot with name or ID ref. Errors: 404.
func (c *snapshots) DeleteSnapshot(ctx context.Context, ref string) error {
	return c.call(ctx, http.MethodDelete, c.endpoint(nil, "v1", "snapshots", ref), nil, nil)
}

// RestoreSnapshot starts a new sandbox that continues from the snapshot
// ref and returns it running (POST /v1/snapshots/{name}/restore). Errors:
// 404, 409 name_taken, 422 snapshot_unusable (image changed, file gone or
// corrupt), 429 capacity_exceeded, 507 insufficient_storage.
func (c *snapshots) RestoreSnapshot(ctx context.Context, ref string, req api.RestoreRequest) (api.Sandbox, error) {
	var sb api.Sandbox
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "snapshots", ref, "restore"), req, &sb)
	return sb, err
}
