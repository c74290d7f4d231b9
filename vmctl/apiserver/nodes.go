package apiserver

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
)

// NodeBackend is the part of a Backend that serves a cluster's nodes
// (serve --cluster; vmctl/cluster); a Backend without it answers the
// /v1/nodes routes 501 not_implemented, as does a daemon outside a
// cluster.
type NodeBackend interface {
	// ListNodes lists the cluster's nodes by name. Errors: 503
	// cluster_unavailable while NATS is unreachable.
	ListNodes(ctx context.Context) ([]api.Node, error)
	// DrainNode stops (drain) or resumes (!drain) the named node's pulls
	// of creates; its sandboxes run on either way. Errors: 404 for an
	// unknown node, 503 cluster_unavailable.
	DrainNode(ctx context.Context, name string, drain bool) (api.Node, error)
}

func listNodes(s *Server, r *request) (api.NodeList, error) {
	list, err := s.backend.(NodeBackend).ListNodes(r.Context())
	return api.NodeList{Nodes: nonNil(list)}, err
}

func drainNode(s *Server, r *request) (api.Node, error) {
	return s.backend.(NodeBackend).DrainNode(r.Context(), r.node, true)
}

func undrainNode(s *Server, r *request) (api.Node, error) {
	return s.backend.(NodeBackend).DrainNode(r.Context(), r.node, false)
}
