package apiserver

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

func listNodes(s *Server, r *request) (api.NodeList, error) {
	list, err := s.backend.(backend.NodeBackend).ListNodes(r.Context())
	return api.NodeList{Nodes: nonNil(list)}, err
}

func drainNode(s *Server, r *request) (api.Node, error) {
	return s.backend.(backend.NodeBackend).DrainNode(r.Context(), r.node, true)
}

func undrainNode(s *Server, r *request) (api.Node, error) {
	return s.backend.(backend.NodeBackend).DrainNode(r.Context(), r.node, false)
}
