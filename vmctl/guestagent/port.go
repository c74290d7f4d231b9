package guestagent

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// Port is the guest end of a virtio-serial port, opened once and kept open
// for the agent's lifetime. *os.File satisfies it.
//
// ServePort relies on the semantics observed with QEMU's virtio-serial:
// while no host client is connected, Read returns EOF at once (0 bytes);
// bytes the host writes are delivered in order, including bytes written
// before the guest opened the port; after the host disconnects, reads
// return EOF again. SetDeadline must make pending Reads and Writes return.
type Port interface {
	io.ReadWriter
	SetDeadline(t time.Time) error
}

const (
	// idleBackoffMin and idleBackoffMax bound the sleep between reads that
	// return EOF while no host is connected.
	idleBackoffMin = time.Millisecond
	idleBackoffMax = 20 * time.Millisecond
	// sessionErrorBackoff is the pause after a session that failed before
	// receiving any byte.
	sessionErrorBackoff = 100 * time.Millisecond
)

// ServePort serves host sessions on port one after another, one at a time,
// until ctx is done, and then returns ctx.Err(). A session starts with the
// first bytes the host sends (EOFs before them mean "no host yet" and are
// retried with a short backoff on the same port) and ends at the next EOF
// (the host disconnected) or on a protocol error; each session's outcome is
// passed to onSession (if not nil) with the error Serve returned.
//
// Detached processes live in opts.Processes, or in one table ServePort
// makes for all its sessions (closed when it returns), so they survive a
// host that goes away.
func ServePort(ctx context.Context, port Port, opts Options, onSession func(error)) error {
	if opts.Processes == nil {
		opts.Processes = NewProcesses()
		defer opts.Processes.Close()
	}
	pc := &portConn{port: port}
	// One buffered reader for all sessions: a session that ends because a
	// new host's hello arrived leaves that hello in it.
	br := bufio.NewReaderSize(pc, agentproto.ChunkSize)
	for ctx.Err() == nil {
		_ = port.SetDeadline(time.Time{})
		sess := pc.newSession(ctx, br.Buffered() > 0)
		err := serve(ctx, sess, br, opts)
		if ctx.Err() != nil {
			break
		}
		if onSession != nil {
			onSession(err)
		}
		if err != nil && !pc.active {
			// The port itself fails (not a host's protocol error): do
			// not spin on it.
			t := time.NewTimer(sessionErrorBackoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
		}
	}
	return ctx.Err()
}

// portConn reads a Port for the current session. Only the goroutine of the
// current session reads (the handshake, then yamux's receive loop), and
// serve returns only after that goroutine ended, so the per-session fields
// need no lock.
type portConn struct {
	port   Port
	ctx    context.Context
	active bool // the session received bytes: EOF now means "host gone"
	closed chan struct{}
	isDone *atomic.Bool
}

// newSession resets the per-session state and returns the session's
// connection; closing it ends the session without closing the port.
func (c *portConn) newSession(ctx context.Context, active bool) *portSession {
	c.ctx, c.active = ctx, active
	c.closed = make(chan struct{})
	c.isDone = new(atomic.Bool)
	return &portSession{pc: c, closed: c.closed, isDone: c.isDone}
}

// Read implements io.Reader.
func (c *portConn) Read(p []byte) (int, error) {
	backoff := idleBackoffMin
	for {
		if c.isDone.Load() {
			return 0, net.ErrClosed
		}
		n, err := c.port.Read(p)
		if n > 0 {
			c.active = true
			return n, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			if c.isDone.Load() {
				return 0, net.ErrClosed
			}
			return 0, err
		}
		if c.active {
			return 0, io.EOF // the host went away
		}
		// No host connected yet: wait on the same open port.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.closed:
			t.Stop()
			return 0, net.ErrClosed
		case <-c.ctx.Done():
			t.Stop()
			return 0, c.ctx.Err()
		}
		backoff = min(2*backoff, idleBackoffMax)
	}
}

// portSession is one host session on a portConn.
type portSession struct {
	pc     *portConn
	closed chan struct{}
	isDone *atomic.Bool
}

// Read is only used through the shared buffered reader; it exists to
// satisfy io.ReadWriteCloser.
func (s *portSession) Read(p []byte) (int, error) { return s.pc.Read(p) }

// Write implements io.Writer.
func (s *portSession) Write(p []byte) (int, error) {
	if s.isDone.Load() {
		return 0, net.ErrClosed
	}
	return s.pc.port.Write(p)
}

// Close marks the session closed and kicks pending port I/O with a past
// deadline; the port stays open.
func (s *portSession) Close() error {
	if s.isDone.CompareAndSwap(false, true) {
		close(s.closed)
		_ = s.pc.port.SetDeadline(time.Unix(1, 0))
	}
	return nil
}
