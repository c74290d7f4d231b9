package backendtest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// PortForward returns a valid port forward fixture for guestPort.
func PortForward(guestPort int) api.PortForward {
	return api.PortForward{
		GuestPort: guestPort, HostAddr: "127.0.0.1:41234", CreatedAt: Epoch, Open: true,
		Connections: 3, Active: 1, Failed: 1, BytesIn: 120, BytesOut: 4096,
		LastError: "connect to guest port 8000: connection refused",
	}
}

// PortFns are the functions of the fake's port methods (see
// Fake.Ports); nil ones answer fixtures.
type PortFns struct {
	ForwardFn func(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error)
	ListFn    func(ctx context.Context, ref string) ([]api.PortForward, error)
	RemoveFn  func(ctx context.Context, ref string, guestPort int) error
}

var _ backend.PortBackend = (*Fake)(nil)

// ForwardPort implements backend.PortBackend.
func (b *Fake) ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error) {
	b.record("ForwardPort", ref)
	if b.Ports.ForwardFn != nil {
		return b.Ports.ForwardFn(ctx, ref, req)
	}
	return PortForward(req.GuestPort), nil
}

// ListPorts implements backend.PortBackend.
func (b *Fake) ListPorts(ctx context.Context, ref string) ([]api.PortForward, error) {
	b.record("ListPorts", ref)
	if b.Ports.ListFn != nil {
		return b.Ports.ListFn(ctx, ref)
	}
	return []api.PortForward{PortForward(8000)}, nil
}

// RemovePort implements backend.PortBackend.
func (b *Fake) RemovePort(ctx context.Context, ref string, guestPort int) error {
	b.record("RemovePort", ref)
	if b.Ports.RemoveFn != nil {
		return b.Ports.RemoveFn(ctx, ref, guestPort)
	}
	return nil
}
