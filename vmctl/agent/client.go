// Package agent is the host-side client of the agentbox guest agent. It
// speaks vmctl/agentproto over a connection to the VM's virtio-serial
// channel (typically the Unix socket of a QEMU chardev).
//
// A [Client] multiplexes concurrent operations, each on its own yamux
// stream. Errors reported by the guest are *agentproto.Error (use errors.As
// for the Code, or errors.Is with fs.ErrNotExist and friends); a broken or
// closed session yields errors wrapping [ErrDisconnected]; a cancelled or
// expired ctx yields errors wrapping ctx.Err().
package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrDisconnected is wrapped by every error caused by the session being
// closed (by Close) or broken (the guest went away, the VM stopped).
// It is of errdefs.ErrInternal: vmctl/sandbox turns it into the guest's
// death (503 guest_died) or sandbox_not_running where it can tell; the
// rest ("guest agent connection lost") is answered 500 internal, as it
// always was.
var ErrDisconnected = errdefs.New(errdefs.ErrInternal, "", "agent: disconnected from guest agent")

// Options configures a Client. The zero value is usable.
type Options struct {
	// Logger receives debug records about the session (handshake,
	// disconnect); nil discards.
	Logger *slog.Logger
	// StallTimeout is how long one write of an operation waits for the
	// guest to take its bytes before it fails with ErrStalled; 0 is
	// agentproto.WriteTimeout.
	StallTimeout time.Duration
}

// Client is a session with one guest agent. It is safe for concurrent use;
// each operation runs on its own stream.
type Client struct {
	conn         net.Conn
	guard        *agentproto.Guard
	sess         *yamux.Session
	agentVersion string
	log          *slog.Logger
	stall        time.Duration // Options.StallTimeout
}

// Dial performs the handshake on conn and starts the session. It takes
// ownership of conn: conn is closed when Dial fails and by Client.Close.
// The handshake honours ctx's deadline and cancellation; after Dial
// returns, ctx no longer matters (each operation has its own).
//
// Errors wrap ctx.Err() when ctx ended first, agentproto.ErrVersionMismatch
// when the guest speaks another protocol version (the message says what to
// rebuild), agentproto.ErrNoHandshake when the guest sent 1 MiB without an
// answer, or the connection error (io.EOF if the peer closed it).
func Dial(ctx context.Context, conn net.Conn, opts Options) (*Client, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	nonce, err := agentproto.NewNonce()
	if err != nil {
		conn.Close()
		return nil, err
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReaderSize(conn, agentproto.ChunkSize)
	version, err := agentproto.ClientHandshake(br, conn, nonce)
	stopped := stop()
	if err == nil && !stopped {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if cerr := ctxErr(ctx, err); cerr != nil {
			return nil, fmt.Errorf("agent: handshake: %w (%v)", cerr, err)
		}
		return nil, fmt.Errorf("agent: handshake: %w", err)
	}
	_ = conn.SetDeadline(time.Time{})
	guard := agentproto.GuardHost(&bufConn{Conn: conn, r: br})
	sess, err := yamux.Client(guard, agentproto.YamuxConfig())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("agent: yamux: %w", err)
	}
	log.Debug("guest agent connected", "agent_version", version)
	stall := opts.StallTimeout
	if stall <= 0 {
		stall = agentproto.WriteTimeout
	}
	return &Client{conn: conn, guard: guard, sess: sess, agentVersion: version, log: log, stall: stall}, nil
}

// bufConn reads through the handshake's buffered reader so that no byte the
// guest sent after its reply is lost.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

// Read implements io.Reader.
func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// AgentVersion returns the version string the guest agent reported in the
// handshake.
func (c *Client) AgentVersion() string { return c.agentVersion }

// Done returns a channel closed when the session ends (Close, or the
// connection broke; see Violation for why).
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// Violation returns why the host ended the session because the guest
// broke the protocol (an error wrapping agentproto.ErrProtocolViolation
// that names the frame and the limit, see agentproto.GuardHost), or nil.
// It is set before Done is closed.
func (c *Client) Violation() error { return c.guard.Err() }

// Close ends the session and closes the connection. Operations in flight
// fail with errors wrapping ErrDisconnected; commands still running in the
// guest are killed by the guest. It is idempotent and returns nil.
func (c *Client) Close() error {
	err := c.sess.Close()
	c.log.Debug("guest agent session closed")
	return err
}

// op is one operation's stream with its frame reader and writer.
type op struct {
	c    *Client
	name string
	ctx  context.Context
	st   *yamux.Stream
	fr   *agentproto.Reader
	fw   *agentproto.Writer
	stop func() bool
}

// open opens a stream for operation name, sends req and arms ctx: its
// deadline becomes the stream deadline, its cancellation a past deadline
// that unblocks pending reads and writes.
func (c *Client) open(ctx context.Context, name string, req *agentproto.Request) (*op, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("agent: %s: %w", name, err)
	}
	st, err := c.sess.OpenStream()
	if err != nil {
		return nil, c.wrap(ctx, name, err)
	}
	o := &op{c: c, name: name, ctx: ctx, st: st, fr: agentproto.NewReader(st)}
	o.fw = agentproto.NewWriter(stallWriter{o})
	if d, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(d)
	}
	o.stop = context.AfterFunc(ctx, func() { _ = st.SetDeadline(time.Unix(1, 0)) })
	if err := o.fw.WriteJSON(agentproto.FrameRequest, req); err != nil {
		o.close()
		return nil, c.wrap(ctx, name, err)
	}
	return o, nil
}

// ErrStalled: the guest took none of an operation's bytes for
// agentproto.WriteTimeout (it stopped reading its stream or its port:
// yamux would wait for the stream's window without end). The operation
// fails; the session stays. Of errdefs.ErrUnavailable (503 in the REST
// API).
var ErrStalled = errdefs.New(errdefs.ErrUnavailable, "", "agent: the guest stopped taking data")

// stallWriter is an op's stream as its frame writer sees it: each write
// waits at most Options.StallTimeout (or until ctx's deadline, if
// sooner) for the guest to take the bytes, and fails with ErrStalled
// after that.
type stallWriter struct{ o *op }

func (w stallWriter) Write(p []byte) (int, error) {
	st, ctx := w.o.st, w.o.ctx
	limit := time.Now().Add(w.o.c.stall)
	d, hasDeadline := ctx.Deadline()
	if hasDeadline && d.Before(limit) {
		limit = d
	}
	_ = st.SetWriteDeadline(limit)
	if ctx.Err() != nil { // cancelled meanwhile: keep the ctx hook's past deadline
		_ = st.SetWriteDeadline(time.Unix(1, 0))
	}
	n, err := st.Write(p)
	var ne net.Error
	if err != nil && ctx.Err() == nil && (!hasDeadline || d.After(limit)) &&
		(errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		return n, fmt.Errorf("%w: it took no bytes for %s (a guest that stops reading its port)", ErrStalled, w.o.c.stall)
	}
	return n, err
}

// close releases the stream and the ctx hook.
func (o *op) close() {
	o.stop()
	_ = o.st.Close()
}

// err wraps an error of the operation, see Client.wrap.
func (o *op) err(err error) error { return o.c.wrap(o.ctx, o.name, err) }

// wrap gives an operation error its final form: guest errors (*Error,
// *ExecError) stay reachable with errors.As, ctx ends wrap ctx.Err(), and
// transport failures wrap ErrDisconnected.
func (c *Client) wrap(ctx context.Context, name string, err error) error {
	var pe *agentproto.Error
	var ee *agentproto.ExecError
	switch {
	case errors.As(err, &pe), errors.As(err, &ee):
		return fmt.Errorf("agent: %s: %w", name, err)
	case ctxErr(ctx, err) != nil:
		return fmt.Errorf("agent: %s: %w", name, ctxErr(ctx, err))
	case c.guard.Err() != nil:
		return fmt.Errorf("agent: %s: %w: %w", name, ErrDisconnected, c.guard.Err())
	case c.sess.IsClosed(), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, yamux.ErrSessionShutdown), errors.Is(err, yamux.ErrConnectionReset),
		errors.Is(err, yamux.ErrStreamClosed):
		return fmt.Errorf("agent: %s: %w: %v", name, ErrDisconnected, err)
	}
	return fmt.Errorf("agent: %s: %w", name, err)
}

// call runs a request/response operation: it sends req and decodes the
// FrameResponse into resp (nil to ignore it).
func (c *Client) call(ctx context.Context, name string, req *agentproto.Request, resp any) error {
	o, err := c.open(ctx, name, req)
	if err != nil {
		return err
	}
	defer o.close()
	if err := o.fr.ReadJSON(agentproto.FrameResponse, resp); err != nil {
		return o.err(err)
	}
	return nil
}

// ctxErr returns ctx.Err(), or context.DeadlineExceeded when err is the
// timeout of a connection or stream deadline derived from ctx's deadline
// (which may fire a moment before ctx itself reports it); otherwise nil.
func ctxErr(ctx context.Context, err error) error {
	if e := ctx.Err(); e != nil {
		return e
	}
	var ne net.Error
	if _, ok := ctx.Deadline(); ok && (errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()) {
		return context.DeadlineExceeded
	}
	return nil
}
