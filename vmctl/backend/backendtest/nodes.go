package backendtest

import (
	"context"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// Node returns a valid cluster node fixture called name.
func Node(name string) api.Node {
	return api.Node{
		Name: name, Advertise: "https://" + name + ":7070", State: "up",
		Capacity:  api.Capacity{MemoryMiB: 8192, VCPUs: 8, UsedMemoryMiB: 1024, UsedVCPUs: 2},
		Sandboxes: 2, LastSeen: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Version: "test",
	}
}

// NodeFns are the functions of the fake's cluster node methods (see
// Fake.Nodes); nil ones answer fixtures.
type NodeFns struct {
	ListFn  func(ctx context.Context) ([]api.Node, error)
	DrainFn func(ctx context.Context, name string, drain bool) (api.Node, error)
}

// nodeFake is the part of a Fake serving backend.NodeBackend from
// Nodes (promoted: Fake.Nodes) or fixtures; it records its calls in its
// own log, which Fake.Calls merges.
type nodeFake struct {
	Nodes NodeFns
	log   callLog
}

var _ backend.NodeBackend = (*Fake)(nil)

// ListNodes implements backend.NodeBackend.
func (p *nodeFake) ListNodes(ctx context.Context) ([]api.Node, error) {
	p.log.record("ListNodes", "")
	if p.Nodes.ListFn != nil {
		return p.Nodes.ListFn(ctx)
	}
	return []api.Node{Node("h1"), Node("h2")}, nil
}

// DrainNode implements backend.NodeBackend.
func (p *nodeFake) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	p.log.record("DrainNode", name)
	if p.Nodes.DrainFn != nil {
		return p.Nodes.DrainFn(ctx, name, drain)
	}
	n := Node(name)
	if drain {
		n.State, n.Reason = "draining", "drained: pulls no creates (agentbox node undrain "+name+" to resume)"
	}
	return n, nil
}
