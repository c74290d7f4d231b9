package client_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

func TestSnapshotRoundTrips(t *testing.T) {
	ctx := context.Background()
	var got []string
	b := &backendtest.Fake{}
	b.Snapshot.SaveFn = func(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
		got = append(got, "save "+ref+" "+req.Name)
		return backendtest.Snapshot(req.Name), nil
	}
	b.Snapshot.ListFn = func(ctx context.Context, sandbox string) ([]api.Snapshot, error) {
		got = append(got, "list "+sandbox)
		return []api.Snapshot{backendtest.Snapshot("a"), backendtest.Snapshot("b")}, nil
	}
	b.Snapshot.DeleteFn = func(ctx context.Context, name string) error {
		got = append(got, "delete "+name)
		if name == "gone" {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no snapshot %q", name)
		}
		return nil
	}
	b.Snapshot.RestoreFn = func(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
		got = append(got, "restore "+name+" "+req.Name+" "+req.Labels["k"])
		if req.Limits.TTLSeconds != 60 {
			t.Errorf("restore limits %+v", req.Limits)
		}
		return backendtest.Sandbox(backendtest.SandboxID), nil
	}
	c := start(t, b)
	if s, err := c.SaveSnapshot(ctx, "work1", "before"); err != nil || !reflect.DeepEqual(s, backendtest.Snapshot("before")) {
		t.Errorf("SaveSnapshot = %+v, %v", s, err)
	}
	if l, err := c.ListSnapshots(ctx, ""); err != nil || len(l) != 2 || l[1].Name != "b" {
		t.Errorf("ListSnapshots = %+v, %v", l, err)
	}
	if _, err := c.ListSnapshots(ctx, "work1"); err != nil {
		t.Error(err)
	}
	if s, err := c.GetSnapshot(ctx, "before"); err != nil || s.Name != "before" {
		t.Errorf("GetSnapshot = %+v, %v", s, err)
	}
	if err := c.DeleteSnapshot(ctx, "before"); err != nil {
		t.Error(err)
	}
	var ae *api.Error
	if err := c.DeleteSnapshot(ctx, "gone"); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != api.CodeNotFound {
		t.Errorf("DeleteSnapshot of a missing one = %v", err)
	}
	if sb, err := c.RestoreSnapshot(ctx, "before", api.RestoreRequest{Name: "w2", Labels: map[string]string{"k": "v"}, Limits: api.Limits{TTLSeconds: 60}}); err != nil || sb.ID != backendtest.SandboxID {
		t.Errorf("RestoreSnapshot = %+v, %v", sb, err)
	}
	want := []string{"save work1 before", "list ", "list work1", "delete before", "delete gone", "restore before w2 v"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("backend saw %q, want %q", got, want)
	}
}
