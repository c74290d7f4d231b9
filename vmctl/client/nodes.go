package client

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ListNodes returns the cluster's nodes by name (GET /v1/nodes). Errors:
// 501 not_implemented from a daemon outside a cluster, 503
// cluster_unavailable while NATS is unreachable.
func (c *daemon) ListNodes(ctx context.Context) ([]api.Node, error) {
	var list api.NodeList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "nodes"), nil, &list)
	return list.Nodes, err
}

// DrainNode stops (drain) or resumes (!drain) the named node's pulls of
// creates (POST /v1/nodes/{node}/drain or /undrain) and returns the node.
// Errors: 404 for an unknown node.
func (c *daemon) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	op := "undrain"
	if drain {
		op = "drain"
	}
	var n api.Node
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "nodes", name, op), nil, &n)
	return n, err
}

// ClusterSecrets fetches the secrets of the queued create create (its
// secrets reference) from the node it came in at (POST
// /v1/cluster/secrets): what a cluster node that took a create calls,
// with the cluster token and its own name (vmctl/clusterproxy's
// SecretsClient). Errors: 403 for a caller that is not the create's
// taker, 404 when the create no longer waits there, 501 outside a
// cluster.
func (c *daemon) ClusterSecrets(ctx context.Context, create string) ([]api.ClusterSecret, error) {
	var out api.ClusterSecrets
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "cluster", "secrets"), api.ClusterSecretsRequest{Create: create}, &out)
	return out.Secrets, err
}
