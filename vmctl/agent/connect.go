package agent

import (
	"context"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Connect opens a TCP connection to port on the guest's loopback over the
// agent channel (agentproto.OpConnect) and returns it once the guest
// connected: reads and writes carry the connection's bytes with the
// stream's back-pressure, CloseWrite half-closes it, Abort resets it in
// the guest, Close ends it. ctx bounds the connect only, not the
// connection. Errors: *agentproto.Error with CodeNotFound when nothing
// listens on the port in the guest (connection refused), CodeInvalid for
// a port outside 1–65535; ErrDisconnected, ctx.Err() as for every
// operation.
func (c *Client) Connect(ctx context.Context, port int) (*agentproto.Conn, error) {
	o, err := c.open(ctx, "connect", &agentproto.Request{Op: agentproto.OpConnect, Connect: &agentproto.ConnectRequest{Port: port}})
	if err != nil {
		return nil, err
	}
	if err := o.fr.ReadJSON(agentproto.FrameResponse, nil); err != nil {
		o.close()
		return nil, o.err(err)
	}
	// The connection outlives ctx: drop the ctx hook and its deadline,
	// and the op's stall bound (a net.Conn's deadlines are its user's).
	o.stop()
	_ = o.st.SetDeadline(time.Time{})
	return agentproto.NewConn(o.st, o.fr, agentproto.NewWriter(o.st), agentproto.Addr("host"), agentproto.Addr("guest:"+strconv.Itoa(port))), nil
}

// Streams returns the number of the session's open streams (operations in
// flight, forwarded connections): what leak checks compare.
func (c *Client) Streams() int { return c.sess.NumStreams() }
