package mcp_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// snapStore is a fake backend's snapshots, one of them ("other") taken
// outside the session.
type snapStore struct {
	mu      sync.Mutex
	snaps   []api.Snapshot
	deleted []string
	n       int
}

func (st *snapStore) backend() *backendtest.Fake {
	b := &backendtest.Fake{}
	b.Snapshot.SaveFn = func(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.n++
		snap := backendtest.Snapshot(req.Name)
		snap.ID, snap.Sandbox = fmt.Sprintf("5%011d", st.n), ref
		st.snaps = append(st.snaps, snap)
		return snap, nil
	}
	b.Snapshot.ListFn = func(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		out := []api.Snapshot{}
		for _, snap := range st.snaps {
			if sandbox == "" || snap.Sandbox == sandbox {
				out = append(out, snap)
			}
		}
		return out, nil
	}
	find := func(ref string) (int, error) {
		for i, snap := range st.snaps {
			if snap.ID == ref || snap.Name == ref {
				return i, nil
			}
		}
		return 0, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no snapshot %q", ref)
	}
	b.Snapshot.GetFn = func(ctx context.Context, ref string) (api.Snapshot, error) {
		st.mu.Lock()
		defer st.mu.Unlock()
		i, err := find(ref)
		if err != nil {
			return api.Snapshot{}, err
		}
		return st.snaps[i], nil
	}
	b.Snapshot.DeleteFn = func(ctx context.Context, ref string) error {
		st.mu.Lock()
		defer st.mu.Unlock()
		i, err := find(ref)
		if err != nil {
			return err
		}
		st.deleted = append(st.deleted, ref)
		st.snaps = slices.Delete(st.snaps, i, i+1)
		return nil
	}
	b.ListSandboxesFn = func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
		return nil, nil
	}
	other := backendtest.Snapshot("other")
	other.ID = "700000000000"
	st.snaps = append(st.snaps, other)
	return b
}

// names returns the snapshots' names.
func names(list []mcp.SnapshotInfo) []string {
	var out []string
	for _, s := range list {
		out = append(out, s.Name)
	}
	return out
}

// TestSnapshotTools: list_snapshots lists the session's snapshots (all:
// the daemon's), delete_snapshot removes one by name, and with Cleanup the
// snapshots the session took and kept are removed when it ends (a
// snapshot taken outside the session stays); without Cleanup nothing is.
func TestSnapshotTools(t *testing.T) {
	for _, cleanup := range []bool{true, false} {
		t.Run(fmt.Sprintf("cleanup=%v", cleanup), func(t *testing.T) {
			st := &snapStore{}
			h := newHarness(t, st.backend(), mcp.Config{Cleanup: cleanup})
			var a, b mcp.SnapshotInfo
			h.call(t, "snapshot", map[string]any{"sandbox": "w1", "name": "s1"}, &a)
			h.call(t, "snapshot", map[string]any{"sandbox": "w2", "name": "s2"}, &b)
			if a.ID != "500000000001" || a.Name != "s1" || a.Sandbox != "w1" || a.SandboxName != "work1" {
				t.Fatalf("snapshot: %+v", a)
			}
			var list mcp.SnapshotsOutput
			h.call(t, "list_snapshots", nil, &list)
			if got := names(list.Snapshots); !slices.Equal(got, []string{"s1", "s2"}) {
				t.Fatalf("list_snapshots: %q", got)
			}
			h.call(t, "list_snapshots", map[string]any{"all": true}, &list)
			if got := names(list.Snapshots); !slices.Equal(got, []string{"other", "s1", "s2"}) {
				t.Fatalf("list_snapshots all: %q", got)
			}
			h.call(t, "list_snapshots", map[string]any{"sandbox": "w2"}, &list)
			if got := names(list.Snapshots); !slices.Equal(got, []string{"s2"}) {
				t.Fatalf("list_snapshots of w2: %q", got)
			}
			var del mcp.DeleteSnapshotOutput
			h.call(t, "delete_snapshot", map[string]any{"snapshot": "s1"}, &del)
			if del.Deleted != a.ID {
				t.Fatalf("delete_snapshot: %+v", del)
			}
			if msg := h.callErr(t, "delete_snapshot", map[string]any{"snapshot": "s1"}); msg != `not_found: no snapshot "s1"` {
				t.Fatalf("delete_snapshot again: %q", msg)
			}
			h.call(t, "list_snapshots", nil, &list)
			if got := names(list.Snapshots); !slices.Equal(got, []string{"s2"}) {
				t.Fatalf("list_snapshots after delete_snapshot: %q", got)
			}

			h.cs.Close()
			h.cancel()
			if err := <-h.served; err != nil {
				t.Fatalf("Serve: %v", err)
			}
			h.served <- nil // for the cleanup
			st.mu.Lock()
			defer st.mu.Unlock()
			want := []string{a.ID}
			if cleanup {
				want = append(want, b.ID)
			}
			if !slices.Equal(st.deleted, want) {
				t.Fatalf("deleted %q, want %q", st.deleted, want)
			}
		})
	}
}
