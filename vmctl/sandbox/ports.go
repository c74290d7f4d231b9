package sandbox

import (
	"context"
	"slices"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// PortForward is one port forward of a sandbox as its record keeps it:
// a host listener whose connections go to a guest port over the agent
// channel (vmctl/portfwd; the daemon opens and closes the listeners).
type PortForward struct {
	// GuestPort is the guest's TCP port, 1–65535.
	GuestPort int `json:"guest_port"`
	// HostAddr is the listener's address as bound ("127.0.0.1:41234"):
	// a restarted daemon listens there again.
	HostAddr string `json:"host_addr"`
	// CreatedAt is when the forward was opened (UTC).
	CreatedAt time.Time `json:"created_at"`
}

// portForwards is a sandbox's port forwards as its record keeps them
// (Ports, SetPorts) and the guest connections they carry (Connect). It is
// a part of the Sandbox it points to (linked).
type portForwards struct{ *Sandbox }

// Ports returns the port forwards kept in the sandbox's record.
func (sb *portForwards) Ports() []PortForward {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return slices.Clone(sb.rec.Ports)
}

// SetPorts replaces the port forwards kept in the sandbox's record and
// persists it.
func (sb *portForwards) SetPorts(ports []PortForward) {
	sb.mu.Lock()
	sb.rec.Ports = slices.Clone(ports)
	sb.mu.Unlock()
	sb.persist()
}

// Connect opens a TCP connection to port on the guest's loopback through
// the guest agent (agent.Client.Connect); ctx bounds the connect only.
// Errors: ErrNotRunning; the agent's (CodeNotFound: nothing listens on the
// port), explained.
func (sb *portForwards) Connect(ctx context.Context, port int) (*agentproto.Conn, error) {
	c, err := sb.agentFor()
	if err != nil {
		return nil, err
	}
	conn, err := c.Connect(ctx, port)
	return conn, sb.explain(ctx, err)
}
