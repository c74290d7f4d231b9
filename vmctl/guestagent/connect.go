package guestagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/portfwd"
)

// connectTimeout bounds the dial of OpConnect: loopback answers at once
// unless the listener's backlog is full.
const connectTimeout = 10 * time.Second

// connect serves OpConnect: it dials the port on the guest's loopback,
// answers FrameResponse {} and relays the connection's bytes over the
// stream (agentproto.Conn) until both directions ended or either side
// failed. A dial that fails is the operation's error: CodeNotFound for a
// port nobody listens on.
func (s *server) connect(st *yamux.Stream, fr *agentproto.Reader, fw *agentproto.Writer, req *agentproto.ConnectRequest) error {
	tc, err := dialLoopback(req.Port)
	if err != nil {
		return err
	}
	if err := fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{}); err != nil {
		tc.Close()
		return err
	}
	c := agentproto.NewConn(st, fr, fw, agentproto.Addr("guest:"+strconv.Itoa(req.Port)), agentproto.Addr("host"))
	res := portfwd.Relay(portfwd.TCP{TCPConn: tc}, c, nil)
	if res.Err != nil {
		s.log.Info("forwarded connection aborted", "port", req.Port, "to_host", res.AToB, "from_host", res.BToA, "err", res.Err)
	}
	return nil
}

// dialLoopback connects to 127.0.0.1:port, then [::1]:port when the first
// is refused. Errors: *agentproto.Error with CodeNotFound when both
// refuse, the first dial's error otherwise.
func dialLoopback(port int) (*net.TCPConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	var d net.Dialer
	var first error
	for _, host := range []string{"127.0.0.1", "::1"} {
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil {
			return c.(*net.TCPConn), nil
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
	}
	if errors.Is(first, syscall.ECONNREFUSED) {
		return nil, &agentproto.Error{Code: agentproto.CodeNotFound,
			Message: fmt.Sprintf("connect to guest port %d: connection refused: nothing listens on 127.0.0.1:%d or [::1]:%d in the guest", port, port, port)}
	}
	return nil, fmt.Errorf("connect to guest port %d: %w", port, first)
}
