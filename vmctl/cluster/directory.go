package cluster

import (
	"context"
	"time"
)

// Entry is one sandbox in the cluster's directory (KV bucket
// agentbox_sandboxes, keyed by sandbox ID): which node owns it. Name is
// the sandbox's cluster-unique name ("" for none), Tenant the tenant that
// created it ("" without tenants).
type Entry struct {
	ID, Name, Node, Tenant string
}

// NodeInfo is what a node advertises in the membership bucket
// (agentbox_nodes), as far as routing needs it: its name, the URL other
// nodes reach its API at (--advertise), its State (NodeUp, NodeDraining,
// NodeBreakerOpen, or NodeUnreachable, derived by the reader from a
// LastSeen older than the expiry) and the time of its last heartbeat.
type NodeInfo struct {
	Name, Advertise, State string
	LastSeen               time.Time
}

// Directory finds the node that owns a sandbox. Lookup takes an ID or a
// cluster-unique name; an unknown one is an errdefs.ErrNotFound error.
// List returns every entry of the directory, in no particular order.
type Directory interface {
	Lookup(ctx context.Context, ref string) (Entry, error)
	List(ctx context.Context) ([]Entry, error)
}

// Nodes is the cluster's membership as a reader sees it. Node returns the
// named node (errdefs.ErrNotFound if it never joined or expired from the
// bucket); Self is the name of the node this process runs (--node).
type Nodes interface {
	Node(ctx context.Context, name string) (NodeInfo, error)
	Self() string
}

// Node states, as advertised in the membership bucket and shown by
// `agentbox nodes`. They are API strings: never change one.
const (
	// NodeUp: heartbeating and pulling creates.
	NodeUp = "up"
	// NodeDraining: heartbeating, serving its sandboxes, pulling no new
	// creates (`agentbox node drain`).
	NodeDraining = "draining"
	// NodeBreakerOpen: heartbeating, but its creates failed repeatedly so
	// it pulls none until its breaker's cooldown ends (NodeInfo's reason
	// says why).
	NodeBreakerOpen = "breaker-open"
	// NodeUnreachable: no heartbeat for longer than the expiry (10 s);
	// derived by readers, never written.
	NodeUnreachable = "unreachable"
)
