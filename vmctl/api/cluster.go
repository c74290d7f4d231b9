package api

const (
	// StateUnknown is the state a cluster's list (GET /v1/sandboxes)
	// reports for a sandbox whose node does not answer: the directory
	// knows it, its node cannot tell its state. Its Reason is
	// CodeNodeUnreachable. No sandbox is ever in it on its own node.
	StateUnknown = "unknown"

	// CodeNodeUnreachable is answered 503 to a request for a sandbox
	// that lives on another node of the cluster which does not answer
	// (no heartbeat within the expiry, or its API refuses connections);
	// the message names the node and when it was last seen. It is also
	// the Reason of the StateUnknown entries of a cluster's list.
	CodeNodeUnreachable = "node_unreachable"
)
