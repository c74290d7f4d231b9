package cluster

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
)

// 30 concurrent creates through three nodes, 10 of the names asked for
// twice: each name is given once, the other create gets 409 name_taken
// and leaves no claim or sandbox behind.
func TestNameClaimsAreClusterUnique(t *testing.T) {
	nc := startNATS(t, 3)
	locals := []*fakeLocal{newFakeLocal(64), newFakeLocal(64), newFakeLocal(64)}
	nodes := []*Node{
		joinNode(t, nc, "a", locals[0], nil),
		joinNode(t, nc, "b", locals[1], nil),
		joinNode(t, nc, "c", locals[2], nil),
	}
	ctx := context.Background()
	type result struct {
		name string
		sb   api.Sandbox
		err  error
	}
	results := make(chan result, 30)
	var wg sync.WaitGroup
	for i := range 30 {
		name := ""
		if i < 20 {
			name = fmt.Sprintf("box-%d", i%10) // 0..9 twice
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := nodes[i%3].Place(ctx, apiReq(name, 1))
			results <- result{name, sb, err}
		}()
	}
	wg.Wait()
	close(results)
	won, taken, unnamed := map[string]string{}, map[string]int{}, 0
	for r := range results {
		switch {
		case r.err == nil && r.name == "":
			unnamed++
		case r.err == nil:
			if won[r.name] != "" {
				t.Fatalf("name %s given twice: %s and %s", r.name, won[r.name], r.sb.ID)
			}
			won[r.name] = r.sb.ID
		case api.HasCode(r.err, api.CodeNameTaken) || api.ErrorFrom(r.err).Code == api.CodeNameTaken:
			taken[r.name]++
		default:
			t.Fatalf("create %q: %v", r.name, r.err)
		}
	}
	if unnamed != 10 || len(won) != 10 || len(taken) != 10 {
		t.Fatalf("unnamed %d, names won %d, names refused %d", unnamed, len(won), len(taken))
	}
	for name, n := range taken {
		if n != 1 {
			t.Fatalf("name %s refused %d times", name, n)
		}
	}
	if got := locals[0].count() + locals[1].count() + locals[2].count(); got != 20 {
		t.Fatalf("%d sandboxes made, want 20", got)
	}
	// The directory knows every sandbox by ID and name, from any node.
	testenv.WaitFor(t, 30*time.Second, "20 directory entries", func() bool {
		list, err := nodes[1].List(ctx)
		return err == nil && len(list) == 20
	})
	for name, id := range won {
		e, err := nodes[2].Lookup(ctx, name)
		if err != nil || e.ID != id || e.Name != name {
			t.Fatalf("Lookup(%s) = %+v, %v; want %s", name, e, err, id)
		}
		byID, err := nodes[0].Lookup(ctx, id)
		if err != nil || byID != e {
			t.Fatalf("Lookup(%s) = %+v, %v; want %+v", id, byID, err, e)
		}
	}
	if _, err := nodes[0].Lookup(ctx, "nobody"); !isNotFound(err) {
		t.Fatalf("Lookup(nobody): %v", err)
	}

	// A removal frees the name for the next create, on any node.
	owner := locals[0]
	e, _ := nodes[0].Lookup(ctx, "box-3")
	for i, n := range nodes {
		if n.Self() == e.Node {
			owner = locals[i]
		}
	}
	if err := owner.DeleteSandbox(ctx, e.ID, true); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "box-3 released", func() bool {
		_, err := nodes[1].Lookup(ctx, "box-3")
		return isNotFound(err)
	})
	if _, err := nodes[1].Place(ctx, apiReq("box-3", 1)); err != nil {
		t.Fatalf("create with a released name: %v", err)
	}
}

// A node's directory entries follow its sandboxes after it was away:
// stale ones go, missing ones come back.
func TestReconcile(t *testing.T) {
	nc := startNATS(t, 1)
	local := newFakeLocal(8)
	a := joinNode(t, nc, "a", local, nil)
	ctx := context.Background()
	sb, err := a.Place(ctx, apiReq("keep", 1))
	if err != nil {
		t.Fatal(err)
	}
	gone, err := a.Place(ctx, apiReq("gone", 1))
	if err != nil {
		t.Fatal(err)
	}
	closeCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a.Close(closeCtx)
	// While the node is away its daemon removes one sandbox and makes
	// another (a restore, say).
	local.DeleteSandbox(ctx, gone.ID, true)
	made, _ := local.CreateLocal(ctx, apiReq("made", 1))

	a2 := joinNode(t, nc, "a", local, nil)
	testenv.WaitFor(t, 30*time.Second, "directory reconciled", func() bool {
		list, err := a2.List(ctx)
		if err != nil || len(list) != 2 {
			return false
		}
		_, err1 := a2.Lookup(ctx, "made")
		_, err2 := a2.Lookup(ctx, "gone")
		return err1 == nil && isNotFound(err2)
	})
	if e, err := a2.Lookup(ctx, "keep"); err != nil || e.ID != sb.ID || e.Node != "a" {
		t.Fatalf("keep: %+v %v", e, err)
	}
	if e, err := a2.Lookup(ctx, made.ID); err != nil || e.Name != "made" {
		t.Fatalf("made: %+v %v", e, err)
	}
}

func TestNameKey(t *testing.T) {
	for in, want := range map[string]string{"box-1": "box-1", "a.b": "a_2Eb", "a..b_": "a_2E_2Eb_5F", "X.": "X_2E"} {
		if got := nameKey(in); got != want {
			t.Errorf("nameKey(%q) = %q, want %q", in, got, want)
		}
	}
}
