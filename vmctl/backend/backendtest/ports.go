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

// portFake is the part of a Fake serving backend.PortBackend from
// Ports (promoted: Fake.Ports) or fixtures; it records its calls in its
// own log, which Fake.Calls merges.
type portFake struct {
	Ports PortFns
	log   callLog
}

var _ backend.PortBackend = (*Fake)(nil)

// ForwardPort implements backend.PortBackend.
func (p *portFake) ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error) {
	p.log.record("ForwardPort", ref)
	if p.Ports.ForwardFn != nil {
		return p.Ports.ForwardFn(ctx, ref, req)
	}
	return PortForward(req.GuestPort), nil
}

// ListPorts implements backend.PortBackend.
func (p *portFake) ListPorts(ctx context.Context, ref string) ([]api.PortForward, error) {
	p.log.record("ListPorts", ref)
	if p.Ports.ListFn != nil {
		return p.Ports.ListFn(ctx, ref)
	}
	return []api.PortForward{PortForward(8000)}, nil
}

// RemovePort implements backend.PortBackend.
func (p *portFake) RemovePort(ctx context.Context, ref string, guestPort int) error {
	p.log.record("RemovePort", ref)
	if p.Ports.RemoveFn != nil {
		return p.Ports.RemoveFn(ctx, ref, guestPort)
	}
	return nil
}
