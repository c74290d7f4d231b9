package api

import "strings"

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

// ClusterSecretsRequest is the body of POST /v1/cluster/secrets: one node
// of a cluster asking another for the secrets of a create it took from
// the cluster's queue (vmctl/cluster keeps secret values out of NATS).
// Only a node with the cluster token may ask, and only the node that
// took the create gets them.
type ClusterSecretsRequest struct {
	// Create is the create's secrets reference from the queued create: 32
	// hex digits.
	Create string `json:"create"`
}

// Validate checks r: Create is 32 lowercase hex digits.
func (r *ClusterSecretsRequest) Validate() error {
	if len(r.Create) != 32 || strings.Trim(r.Create, "0123456789abcdef") != "" {
		return Invalidf("create %s is not a create's secrets reference: 32 lowercase hex digits", QuoteShort(r.Create))
	}
	return nil
}

// ClusterSecrets answers POST /v1/cluster/secrets: the secrets of the
// create, values included. No other answer of the API carries a secret's
// value.
type ClusterSecrets struct {
	Secrets []ClusterSecret `json:"secrets"`
}

// ClusterSecret is one secret in ClusterSecrets: a SecretSpec as it
// travels between two nodes (its value readable, unlike in SecretSpec's
// schema, where it is write-only).
type ClusterSecret struct {
	Name  string   `json:"name"`
	Value string   `json:"value"`
	Hosts []string `json:"hosts"`
}
