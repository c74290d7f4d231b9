package agentproto

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ConnectRequest is the request of OpConnect: a TCP connection to Port on
// the guest's loopback. The guest dials 127.0.0.1:Port and, when nothing
// listens there, [::1]:Port (dev servers that bind "localhost" often
// listen on ::1 only). It needs no guest network device.
type ConnectRequest struct {
	// Port is the guest's TCP port, 1–65535.
	Port int `json:"port"`
}

// Validate checks the port's range. Errors are *Error with CodeInvalid.
func (r *ConnectRequest) Validate() error {
	if r.Port < 1 || r.Port > 65535 {
		return invalidf("connect: port %d is not a TCP port (1-65535)", r.Port)
	}
	return nil
}

// The bytes of an OpConnect stream, once the guest answered its
// FrameResponse, travel as FrameData frames (at most ChunkSize bytes each)
// in both directions; FrameDataEnd is TCP's half-close (shutdown of the
// sender's writing side) and may be followed by data in the other
// direction only. A side that fails (its TCP peer reset the connection, a
// write failed) sends a FrameError saying why, when it can, and closes the
// stream; a stream that ends before the sender's FrameDataEnd, or a
// FrameError, aborts the connection: the other side resets its TCP
// connection. Both sides close the stream once both FrameDataEnds went
// through. Frames keep the yamux stream's flow control: a reader that
// stops reading stops the writer once the stream's window
// ([StreamWindow]) is full, so neither side buffers more than that.

// ErrConnAborted is what a [Conn] reports when its peer ended the stream
// without ending its data first: the peer aborted the connection (its
// side failed, or it went away).
var ErrConnAborted = errdefs.New(errdefs.ErrUnavailable, "", "agentproto: connection aborted by the peer")

// Stream is what a [Conn] runs on: a yamux stream (*yamux.Stream), or any
// ordered byte stream with deadlines.
type Stream interface {
	io.ReadWriteCloser
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Conn is one end of an OpConnect stream after the FrameResponse: a byte
// stream with TCP's half-close (CloseWrite) and abort (Abort), carried as
// described above. It implements net.Conn. One goroutine may read while
// another writes; Close and Abort may be called from any goroutine.
// A write that fails (also by a deadline) leaves the writing side broken,
// as a TLS connection's: a frame may be cut short.
type Conn struct {
	st      Stream
	fr      *Reader
	fw      *Writer
	local   net.Addr
	remote  net.Addr
	pending []byte // unread bytes of the last FrameData
	store   []byte // pending's backing array
	rerr    error  // sticky read result: io.EOF after FrameDataEnd, or the failure

	wmu  sync.Mutex // one writer of frames at a time (Write, CloseWrite, Abort)
	werr error      // sticky write failure

	mu      sync.Mutex
	gotEnd  bool // the peer's FrameDataEnd was read
	sentEnd bool // CloseWrite began (FrameDataEnd is being or was written)
	closed  bool
}

// Addr is the address of one end of a [Conn]: the network "agent" and a
// description such as "guest:8000".
type Addr string

// Network returns "agent".
func (Addr) Network() string { return "agent" }

// String returns the description.
func (a Addr) String() string { return string(a) }

// NewConn returns the Conn of an OpConnect stream st whose frames are read
// with fr and written with fw (those of the request and its response).
// local and remote name the ends for LocalAddr and RemoteAddr.
func NewConn(st Stream, fr *Reader, fw *Writer, local, remote net.Addr) *Conn {
	return &Conn{st: st, fr: fr, fw: fw, local: local, remote: remote}
}

// Read reads the peer's bytes. It returns io.EOF after the peer's
// FrameDataEnd, ErrConnAborted when the stream ended before it, the
// peer's *Error after its FrameError, and a timeout (net.Error) when a
// read deadline passed (the Conn stays usable).
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	for {
		t, payload, err := c.fr.ReadFrame()
		if err != nil {
			return 0, c.readFailed(err)
		}
		switch t {
		case FrameData:
			if len(payload) == 0 {
				continue
			}
			n := copy(p, payload)
			c.store = append(c.store[:0], payload[n:]...)
			c.pending = c.store
			return n, nil
		case FrameDataEnd:
			c.mu.Lock()
			c.gotEnd = true
			c.mu.Unlock()
			c.rerr = io.EOF
		case FrameError:
			c.rerr = DecodeError(payload)
		default:
			c.rerr = fmt.Errorf("agentproto: connection: unexpected %s frame", t)
		}
		return 0, c.rerr
	}
}

// readFailed turns a frame reader's error into Read's: a timeout is
// returned as it is (not sticky), the stream's end is ErrConnAborted.
func (c *Conn) readFailed(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		c.rerr = ErrConnAborted
	} else {
		c.rerr = fmt.Errorf("agentproto: connection: %w", err)
	}
	return c.rerr
}

// WaitEnd is for the reader once Read returned io.EOF: it returns nil once
// this side's CloseWrite began (both directions are done), and an error
// when the peer aborted the connection first (the stream ended, or a
// FrameError came): the writer of this side must then stop, since nobody
// reads its bytes any more. Call it from the reading goroutine.
func (c *Conn) WaitEnd() error {
	for {
		c.mu.Lock()
		done := c.sentEnd
		c.mu.Unlock()
		if done {
			return nil
		}
		t, payload, err := c.fr.ReadFrame()
		if err != nil {
			c.mu.Lock()
			done := c.sentEnd
			c.mu.Unlock()
			switch {
			case done:
				return nil // CloseWrite cut the wait short (see there)
			case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
				return ErrConnAborted
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue // a read deadline of the caller's; CloseWrite's is caught above
			}
			return fmt.Errorf("agentproto: connection: %w", err)
		}
		if t == FrameError {
			return DecodeError(payload)
		}
		return fmt.Errorf("agentproto: connection: %s frame after data-end", t)
	}
}

// Write sends p as FrameData frames of at most ChunkSize bytes. It blocks
// while the peer's window is full (back-pressure). Errors: net.ErrClosed
// after CloseWrite or Close, the stream's error (then the writing side is
// broken).
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writable(); err != nil {
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		k := min(len(p), ChunkSize)
		if err := c.fw.WriteFrame(FrameData, p[:k]); err != nil {
			c.werr = err
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// writable says why this side may not write, with wmu held.
func (c *Conn) writable() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed, c.sentEnd:
		return fmt.Errorf("agentproto: connection: write after close: %w", net.ErrClosed)
	}
	return c.werr
}

// CloseWrite sends FrameDataEnd: the peer reads io.EOF after the bytes
// written so far, and this side writes no more. A second call does
// nothing.
func (c *Conn) CloseWrite() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	if c.sentEnd || c.closed {
		c.mu.Unlock()
		return nil
	}
	c.sentEnd = true
	if c.gotEnd {
		// Both directions are done: end a WaitEnd blocked on the
		// stream (the peer closes it only once its own side is done).
		_ = c.st.SetReadDeadline(time.Unix(1, 0))
	}
	c.mu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if err := c.fw.WriteFrame(FrameDataEnd, nil); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// Abort ends the connection because of cause: it tells the peer why with
// a FrameError when no write is in progress (best effort, for at most a
// second) and closes the stream, so the peer resets its TCP connection.
// Blocked reads and writes return.
func (c *Conn) Abort(cause error) {
	_ = c.st.SetReadDeadline(time.Unix(1, 0))
	if c.wmu.TryLock() {
		if c.writable() == nil {
			var pe *Error
			if !errors.As(cause, &pe) {
				pe = &Error{Code: CodeIO, Message: cause.Error()}
			}
			_ = c.st.SetWriteDeadline(time.Now().Add(time.Second))
			_ = c.fw.WriteJSON(FrameError, pe)
		}
		c.wmu.Unlock()
	}
	c.Close()
}

// Close closes the stream. Unless both FrameDataEnds went through first,
// the peer takes it as an abort. Blocked reads and writes return. Calls
// after the first do nothing and return nil.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	_ = c.st.SetReadDeadline(time.Unix(1, 0))
	return c.st.Close()
}

// LocalAddr returns the local end's address given to NewConn.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr returns the remote end's address given to NewConn.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline sets the stream's read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error { return c.st.SetDeadline(t) }

// SetReadDeadline sets the stream's read deadline.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.st.SetReadDeadline(t) }

// SetWriteDeadline sets the stream's write deadline.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.st.SetWriteDeadline(t) }
