package apiserver

import (
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// ports returns the Backend's backend.PortBackend (needs checked it).
func (s *Server) ports() backend.PortBackend { return s.backend.(backend.PortBackend) }

func portLocation(r *request, p api.PortForward) string {
	return "/v1/sandboxes/" + r.id + "/ports/" + strconv.Itoa(p.GuestPort)
}

func forwardPort(s *Server, r *request, req api.PortForwardRequest) (api.PortForward, error) {
	return s.ports().ForwardPort(r.Context(), r.id, req)
}

func listPorts(s *Server, r *request) (api.PortForwardList, error) {
	list, err := s.ports().ListPorts(r.Context(), r.id)
	return api.PortForwardList{Ports: nonNil(list)}, err
}

func removePort(s *Server, r *request) error {
	port, _ := strconv.Atoi(r.port) // checked by newRequest
	return s.ports().RemovePort(r.Context(), r.id, port)
}
