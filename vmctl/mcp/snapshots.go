package mcp

import (
	"context"
	"sort"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
)

// A session's snapshots: snapshots carry no labels, so the server keeps
// the IDs of those each session took (snapshot tool), for list_snapshots
// and for Config.Cleanup, which removes them when the session ends (after
// its sandboxes: a sandbox restored from a snapshot may still use it). A
// snapshot outlives its sandbox, so a session's snapshots of sandboxes it
// already destroyed are among them.

// ListSnapshotsInput is the arguments of list_snapshots.
type ListSnapshotsInput struct {
	All     bool   `json:"all,omitempty" jsonschema:"List every snapshot of the daemon, not only those this session took."`
	Sandbox string `json:"sandbox,omitempty" jsonschema:"Only the snapshots of this sandbox (ID or name; a destroyed sandbox by its ID)."`
}

// SnapshotsOutput is the answer of list_snapshots.
type SnapshotsOutput struct {
	Snapshots []SnapshotInfo `json:"snapshots" jsonschema:"the snapshots, oldest first"`
}

// DeleteSnapshotInput is the arguments of delete_snapshot.
type DeleteSnapshotInput struct {
	Snapshot string `json:"snapshot" jsonschema:"The snapshot's name or ID, as snapshot or list_snapshots gave it."`
}

// DeleteSnapshotOutput is the answer of delete_snapshot.
type DeleteSnapshotOutput struct {
	Deleted string `json:"deleted" jsonschema:"the ID of the snapshot that was removed"`
}

// snapshotInfo converts the API's snapshot.
func snapshotInfo(snap api.Snapshot) SnapshotInfo {
	return SnapshotInfo{ID: snap.ID, Name: snap.Name, Sandbox: snap.Sandbox, SandboxName: snap.SandboxName,
		SourceRemoved: snap.SourceRemoved, CreatedAt: snap.CreatedAt.UTC().Format(time.RFC3339)}
}

// addSnapshotTools registers list_snapshots and delete_snapshot.
func (s *Server) addSnapshotTools() {
	yes, no := true, false
	addTool(s, &sdk.Tool{
		Name:        "list_snapshots",
		Description: "List the snapshots this session took (or, with all, every snapshot of the daemon): id, name, the sandbox it was taken of, when.",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: &no},
	}, s.listSnapshots)
	addTool(s, &sdk.Tool{
		Name:        "delete_snapshot",
		Description: "Remove a snapshot and its files (it takes about as much disk as the sandbox's memory and changed disk). It cannot be undone.",
		Annotations: &sdk.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &no},
	}, s.deleteSnapshot)
}

// trackSnapshot records that session id took snapshot snapID.
func (s *Server) trackSnapshot(id, snapID string) {
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snaps[id] == nil {
		s.snaps[id] = map[string]bool{}
	}
	s.snaps[id][snapID] = true
}

// untrackSnapshot forgets snapshot snapID, whichever session took it.
func (s *Server) untrackSnapshot(snapID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, set := range s.snaps {
		delete(set, snapID)
	}
}

// sessionSnapshots returns the IDs of the snapshots session id took,
// sorted, and with forget, forgets them.
func (s *Server) sessionSnapshots(id string, forget bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for snapID := range s.snaps[id] {
		ids = append(ids, snapID)
	}
	if forget {
		delete(s.snaps, id)
	}
	sort.Strings(ids)
	return ids
}

func (s *Server) snapshot(ctx context.Context, req *sdk.CallToolRequest, in SnapshotInput) (SnapshotInfo, error) {
	snap, err := s.cl.SaveSnapshot(ctx, in.Sandbox, in.Name)
	if err != nil {
		return SnapshotInfo{}, err
	}
	if req != nil {
		s.trackSnapshot(s.sessionID(req.Session), snap.ID)
	}
	return snapshotInfo(snap), nil
}

func (s *Server) listSnapshots(ctx context.Context, req *sdk.CallToolRequest, in ListSnapshotsInput) (SnapshotsOutput, error) {
	list, err := s.cl.ListSnapshots(ctx, in.Sandbox)
	if err != nil {
		return SnapshotsOutput{}, err
	}
	var mine map[string]bool
	if !in.All {
		mine = map[string]bool{}
		if req != nil {
			for _, id := range s.sessionSnapshots(s.sessionID(req.Session), false) {
				mine[id] = true
			}
		}
	}
	out := SnapshotsOutput{Snapshots: make([]SnapshotInfo, 0, len(list))}
	for _, snap := range list {
		if mine == nil || mine[snap.ID] {
			out.Snapshots = append(out.Snapshots, snapshotInfo(snap))
		}
	}
	return out, nil
}

func (s *Server) deleteSnapshot(ctx context.Context, req *sdk.CallToolRequest, in DeleteSnapshotInput) (DeleteSnapshotOutput, error) {
	if in.Snapshot == "" {
		return DeleteSnapshotOutput{}, api.Invalidf("snapshot is missing: give the snapshot's name or ID (list_snapshots lists them)")
	}
	// By ID from here on, so that what is forgotten is what was removed.
	snap, err := s.cl.GetSnapshot(ctx, in.Snapshot)
	if err != nil {
		return DeleteSnapshotOutput{}, err
	}
	if err := s.cl.DeleteSnapshot(ctx, snap.ID); err != nil {
		return DeleteSnapshotOutput{}, err
	}
	s.untrackSnapshot(snap.ID)
	return DeleteSnapshotOutput{Deleted: snap.ID}, nil
}

// cleanupSnapshots removes the snapshots session id took (those still
// there), logging what fails.
func (s *Server) cleanupSnapshots(ctx context.Context, id string) {
	for _, snapID := range s.sessionSnapshots(id, true) {
		if err := s.cl.DeleteSnapshot(ctx, snapID); err != nil && !api.HasCode(err, api.CodeNotFound) {
			s.log.Error("MCP session cleanup: removing a snapshot failed", "session", id, "snapshot", snapID, "err", err)
			continue
		}
		s.log.Info("MCP session cleanup: snapshot removed", "session", id, "snapshot", snapID)
	}
}
