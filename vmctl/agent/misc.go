package agent

import (
	"context"
	"crypto/rand"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Ping measures one round trip to the guest agent: opening a stream,
// sending a request and receiving the answer. Errors as for every
// operation (ErrDisconnected, ctx.Err()).
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	var resp agentproto.PingResponse
	if err := c.call(ctx, "ping", &agentproto.Request{Op: agentproto.OpPing}, &resp); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// SetTime sets the guest's realtime clock to t (nanosecond precision), for
// example after restoring a snapshot. Errors: *agentproto.Error with
// CodePermission or CodeIO when the guest cannot set its clock.
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	return c.call(ctx, "settime", &agentproto.Request{
		Op:      agentproto.OpSetTime,
		SetTime: &agentproto.SetTimeRequest{UnixNs: t.UnixNano()},
	}, nil)
}

// Shutdown asks the guest to sync its disks and power off. It returns once
// the guest acknowledged; the VM stops shortly after, which ends the
// session. Errors: *agentproto.Error with CodeUnsupported when the agent
// does not run as the guest's init.
func (c *Client) Shutdown(ctx context.Context) error {
	return c.call(ctx, "shutdown", &agentproto.Request{
		Op: agentproto.OpShutdown, Shutdown: &agentproto.ShutdownRequest{},
	}, nil)
}

// Reboot is like Shutdown but reboots the guest.
func (c *Client) Reboot(ctx context.Context) error {
	return c.call(ctx, "reboot", &agentproto.Request{
		Op: agentproto.OpShutdown, Shutdown: &agentproto.ShutdownRequest{Reboot: true},
	}, nil)
}

// SetIdentity gives a guest restored from a snapshot its own identity:
// hostname (kernel and /etc/hostname) and, when machineID is set and the
// image has /etc/machine-id, a new machine id (32 lowercase hex digits).
// Errors: *agentproto.Error with CodeInvalid for a malformed hostname or
// id, CodeUnsupported from an agent older than the operation.
func (c *Client) SetIdentity(ctx context.Context, hostname, machineID string) (agentproto.IdentityResponse, error) {
	var resp agentproto.IdentityResponse
	err := c.call(ctx, "identity", &agentproto.Request{
		Op:       agentproto.OpIdentity,
		Identity: &agentproto.IdentityRequest{Hostname: hostname, MachineID: machineID},
	}, &resp)
	return resp, err
}

// ConfigureNetwork (re)configures the guest's NIC: address, default
// route, resolver and host.agentbox.internal (see
// agentproto.OpConfigureNetwork), e.g. after a snapshot restore gave the
// sandbox a new subnet (vmctl/network.Attachment.GuestConfig). Errors:
// *agentproto.Error with CodeInvalid for a malformed request,
// CodeUnsupported when the agent is not the guest's init, else the
// guest's netlink or file error.
func (c *Client) ConfigureNetwork(ctx context.Context, cfg agentproto.NetworkRequest) error {
	return c.call(ctx, "configure-network", &agentproto.Request{Op: agentproto.OpConfigureNetwork, Network: &cfg}, nil)
}

// Reseed gives the guest fresh randomness: n random bytes from the host's
// crypto/rand are mixed into the guest kernel's entropy pool, credited
// as entropy (RNDADDENTROPY), and its CRNG reseeded at once
// (RNDRESEEDCRNG). Call it whenever a guest continues from saved memory
// (a restore, a resume from disk): its CRNG state is otherwise the saved
// one, shared by every fork. The VM generation ID device does the same
// from the kernel side where the guest has the vmgenid driver. Errors:
// *agentproto.Error with CodeInvalid ("unknown op") from an agent older
// than the operation, else the guest's ioctl error.
func (c *Client) Reseed(ctx context.Context) (agentproto.ReseedResponse, error) {
	entropy := make([]byte, 64)
	if _, err := rand.Read(entropy); err != nil {
		return agentproto.ReseedResponse{}, err
	}
	var resp agentproto.ReseedResponse
	err := c.call(ctx, "reseed", &agentproto.Request{Op: agentproto.OpReseed, Reseed: &agentproto.ReseedRequest{Entropy: entropy}}, &resp)
	return resp, err
}
