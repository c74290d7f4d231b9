package apiserver

import (
	"context"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
)

// PortBackend is the part of a Backend that forwards ports (host
// listeners whose connections go to a guest port over the agent
// channel); a Backend without it answers the port routes 501
// not_implemented. Guest ports are 1–65535 (checked).
type PortBackend interface {
	// ForwardPort opens a host listener for the sandbox's guest port
	// (req validated). Errors: 404 not_found, 409 sandbox_not_running,
	// 409 conflict (host address in use, guest port forwarded already),
	// 400 invalid_argument (an address this host does not have), 403
	// permission_denied (a privileged port).
	ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error)
	// ListPorts returns the sandbox's forwards by guest port. Errors: 404.
	ListPorts(ctx context.Context, ref string) ([]api.PortForward, error)
	// RemovePort closes the forward of guestPort. Errors: 404 not_found
	// (no such sandbox or forward).
	RemovePort(ctx context.Context, ref string, guestPort int) error
}

// ports returns the Backend's PortBackend (needs checked it).
func (s *Server) ports() PortBackend { return s.backend.(PortBackend) }

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
