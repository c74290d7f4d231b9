package api

import "time"

// Error codes of a daemon in a cluster (serve --cluster; vmctl/cluster).
const (
	// CodeQueueTimeout is answered 429 to a create that waited in the
	// cluster's create queue for --queue-timeout without a node with room
	// taking it: remove sandboxes, ask for less, or retry later.
	CodeQueueTimeout = "queue_timeout"
	// CodeClusterUnavailable is answered 503 to a cluster-wide operation
	// (a create, the node list, a drain) while NATS is unreachable; the
	// node still serves its own sandboxes, and cluster creates resume by
	// themselves when NATS is back.
	CodeClusterUnavailable = "cluster_unavailable"
)

// Node is one agentbox daemon of a cluster as its membership entry in
// NATS JetStream says (GET /v1/nodes, `agentbox nodes`).
type Node struct {
	// Name is the node's name (serve --node).
	Name string `json:"name"`
	// Advertise is the URL the other nodes reach its API at (serve
	// --advertise); absent in a tenant's list (the operator's).
	Advertise string `json:"advertise,omitempty"`
	// State is "up" (pulling creates), "draining" (serving its sandboxes,
	// pulling no creates: `agentbox node drain`), "breaker-open" (its
	// creates failed repeatedly: it pulls none until the cooldown ends;
	// Reason has the last error) or "unreachable" (no heartbeat for 10 s).
	State string `json:"state"`
	// Reason says why a node is not up: the breaker's last create error
	// and when it closes again, or how long ago it was last heard of.
	Reason string `json:"reason,omitempty"`
	// Capacity is what the node may commit to sandboxes and has committed,
	// as of its last heartbeat.
	Capacity Capacity `json:"capacity"`
	// Sandboxes counts the node's sandboxes (every state).
	Sandboxes int `json:"sandboxes"`
	// LastSeen is the time of its last heartbeat (every 2 s while up).
	LastSeen time.Time `json:"last_seen"`
	// Version is the node's agentbox version.
	Version string `json:"version"`
}

// NodeList is the answer of GET /v1/nodes, nodes by name.
type NodeList struct {
	Nodes []Node `json:"nodes"`
}

// CheckNodeName checks a node name in a path ({node}): the NamePattern
// syntax. Errors are 400 invalid_argument.
func CheckNodeName(name string) error {
	if !nameRE.MatchString(name) {
		return Invalidf("node %s is not a node name: 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", QuoteShort(name))
	}
	return nil
}
