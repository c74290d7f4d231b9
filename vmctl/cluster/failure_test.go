package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
)

// Losing one NATS server of three changes nothing: creates, lookups and
// membership go on (the client reconnects to another server; JetStream
// keeps its quorum of two).
func TestOneNATSServerLost(t *testing.T) {
	nc := startNATS(t, 3)
	la, lb := newFakeLocal(8), newFakeLocal(8)
	a := joinNode(t, nc, "a", la, nil)
	b := joinNode(t, nc, "b", lb, nil)
	ctx := context.Background()
	first, err := a.Place(ctx, apiReq("before", 1))
	if err != nil {
		t.Fatal(err)
	}
	nc.stop(0)
	var after api.Sandbox
	testenv.WaitFor(t, 60*time.Second, "a create with one server down", func() bool {
		after, err = b.Place(ctx, apiReq("after", 1))
		return err == nil
	})
	for _, n := range []*Node{a, b} {
		for ref, id := range map[string]string{"before": first.ID, "after": after.ID} {
			if e, err := n.Lookup(ctx, ref); err != nil || e.ID != id {
				t.Fatalf("%s: Lookup(%s) = %+v, %v", n.Self(), ref, e, err)
			}
		}
	}
	for range 4 {
		if _, err := a.Place(ctx, apiReq("", 1)); err != nil {
			t.Fatalf("create with one server down: %v", err)
		}
	}
	nodes, err := a.ListNodes(ctx)
	if err != nil || len(nodes) != 2 || nodes[0].State != NodeUp || nodes[1].State != NodeUp {
		t.Fatalf("nodes %+v, %v", nodes, err)
	}
}

// Without NATS a cluster create fails at once with 503
// cluster_unavailable while the node's own daemon goes on; when NATS is
// back creates work again by themselves.
func TestNATSDownAndBack(t *testing.T) {
	nc := startNATS(t, 3)
	local := newFakeLocal(8)
	a := joinNode(t, nc, "a", local, nil)
	ctx := context.Background()
	if _, err := a.Place(ctx, apiReq("one", 1)); err != nil {
		t.Fatal(err)
	}
	for i := range nc.servers {
		nc.stop(i)
	}
	testenv.WaitFor(t, 30*time.Second, "a sees NATS gone", func() bool { return !a.Connected() })
	_, err := a.Place(ctx, apiReq("two", 1))
	ae := api.ErrorFrom(err)
	if ae.Status != 503 || ae.Code != api.CodeClusterUnavailable || ae.Message != "NATS is unreachable: cluster creates resume when it is back" {
		t.Fatalf("create without NATS: %d %s %q", ae.Status, ae.Code, ae.Message)
	}
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("not ErrUnavailable: %v", err)
	}
	if _, err := a.ListNodes(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("nodes without NATS: %v", err)
	}
	// The node's own daemon is not the cluster's: a local create and a
	// removal work (the directory catches up when NATS is back).
	local3, err := local.CreateLocal(ctx, apiReq("three", 1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range nc.servers {
		nc.start(i)
	}
	testenv.WaitFor(t, 120*time.Second, "a cluster create after NATS is back", func() bool {
		_, err := a.Place(ctx, apiReq("four", 1))
		return err == nil
	})
	testenv.WaitFor(t, 60*time.Second, "the directory caught up", func() bool {
		e, err := a.Lookup(ctx, "three")
		return err == nil && e.ID == local3.ID
	})
	if _, err := a.Lookup(ctx, "two"); !isNotFound(err) {
		t.Fatalf("the refused create left a name claim: %v", err)
	}
}

// A nats-server without JetStream: the node connects but cannot set up
// its buckets and streams; cluster calls say so and name -js, rather
// than "NATS is unreachable".
func TestNATSWithoutJetStream(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, Authorization: testNATSToken})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(20 * time.Second) {
		t.Fatal("NATS did not come up")
	}
	n, err := Join(context.Background(), Config{Servers: []string{s.ClientURL()}, Token: testNATSToken, Node: "a",
		Advertise: "http://a.test:7070", Version: "test", Local: newFakeLocal(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	want := "this node has not joined the cluster yet: NATS answers but setting up its JetStream buckets and streams failed ("
	var last error
	testenv.WaitFor(t, 30*time.Second, "the setup error in the answer", func() bool {
		_, last = n.ListNodes(context.Background())
		return last != nil && strings.HasPrefix(api.ErrorFrom(last).Message, want)
	})
	ae := api.ErrorFrom(last)
	if ae.Status != 503 || ae.Code != api.CodeClusterUnavailable || !errors.Is(last, ErrUnavailable) ||
		!strings.Contains(ae.Message, "check that every nats-server runs with JetStream (-js)") {
		t.Fatalf("ListNodes on a NATS without JetStream: %d %s %q", ae.Status, ae.Code, ae.Message)
	}
	_, err = n.Place(context.Background(), apiReq("one", 1))
	if ae := api.ErrorFrom(err); ae.Status != 503 || !strings.HasPrefix(ae.Message, want) {
		t.Fatalf("create on a NATS without JetStream: %v", err)
	}
}
