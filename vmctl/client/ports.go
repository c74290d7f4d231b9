package client

import (
	"context"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ports holds the Client's calls on a sandbox's port forwards.
type ports struct{ *transport }

// ForwardPort opens a host listener whose TCP connections go to the
// sandbox's guest port over the guest agent (POST
// /v1/sandboxes/{id}/ports); req.HostAddr "" listens on loopback with a
// free port. The answer's HostAddr is the address bound. Errors: 400 bad
// port or address, 404, 409 conflict (address in use, guest port
// forwarded already) or sandbox_not_running, 501.
func (c *ports) ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error) {
	var p api.PortForward
	err := c.call(ctx, http.MethodPost, c.resumable(nil, "v1", "sandboxes", ref, "ports"), req, &p)
	return p, err
}

// ListPorts returns the sandbox's port forwards by guest port (GET
// /v1/sandboxes/{id}/ports). Errors: 404, 501.
func (c *ports) ListPorts(ctx context.Context, ref string) ([]api.PortForward, error) {
	var list api.PortForwardList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", ref, "ports"), nil, &list)
	return list.Ports, err
}

// RemovePort closes the forward of guestPort (DELETE
// /v1/sandboxes/{id}/ports/{port}). Errors: 400, 404 (no such sandbox or
// forward), 501.
func (c *ports) RemovePort(ctx context.Context, ref string, guestPort int) error {
	return c.call(ctx, http.MethodDelete, c.endpoint(nil, "v1", "sandboxes", ref, "ports", strconv.Itoa(guestPort)), nil, nil)
}
