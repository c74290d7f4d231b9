package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

func TestMembershipAndExpiry(t *testing.T) {
	nc := startNATS(t, 3)
	a := joinNode(t, nc, "a", newFakeLocal(4), nil)
	lb := newFakeLocal(8)
	b := joinNode(t, nc, "b", lb, nil)
	ctx := context.Background()
	if _, err := a.Place(ctx, apiReq("", 2)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "capacity in the heartbeats", func() bool {
		nodes, err := b.ListNodes(ctx)
		if err != nil || len(nodes) != 2 {
			return false
		}
		return nodes[0].Capacity.UsedVCPUs+nodes[1].Capacity.UsedVCPUs == 2 && nodes[0].Sandboxes+nodes[1].Sandboxes == 1
	})
	nodes, err := a.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if nodes[0].Name != "a" || nodes[1].Name != "b" || nodes[0].Capacity.VCPUs != 4 || nodes[1].Capacity.VCPUs != 8 ||
		nodes[1].Advertise != "http://b.test:7070" || nodes[0].State != NodeUp || nodes[1].Version != "test" {
		t.Fatalf("nodes = %+v", nodes)
	}
	if a.Self() != "a" {
		t.Fatalf("Self = %q", a.Self())
	}

	// b stops heartbeating: readers derive unreachable from the age.
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b.Close(closeCtx)
	testenv.WaitFor(t, 30*time.Second, "b unreachable", func() bool {
		info, err := a.Node(ctx, "b")
		return err == nil && info.State == NodeUnreachable
	})
	nodes, _ = a.ListNodes(ctx)
	if nodes[1].State != NodeUnreachable || nodes[1].Reason == "" {
		t.Fatalf("b = %+v", nodes[1])
	}
	if _, err := a.Node(ctx, "nope"); !isNotFound(err) {
		t.Fatalf("unknown node: %v", err)
	}
}
