package agent

import (
	"context"
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
