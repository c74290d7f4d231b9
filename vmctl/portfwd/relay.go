package portfwd

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
)

// Conn is one end of a relayed connection: a byte stream with TCP's
// half-close. *net.TCPConn (through TCP) and *agentproto.Conn are Conns.
type Conn interface {
	io.Reader
	io.Writer
	// CloseWrite ends this side's writing: the peer reads EOF.
	CloseWrite() error
	// Close releases the connection.
	Close() error
}

// aborter is a Conn that can end abnormally with a cause its peer learns
// (TCP: a reset; agentproto.Conn: a FrameError and the stream's end).
type aborter interface{ Abort(cause error) }

// ender is a Conn that must be watched after its reading side ended: see
// agentproto.Conn.WaitEnd.
type ender interface{ WaitEnd() error }

// chunkSize is the copy buffer per direction (agentproto.ChunkSize: one
// frame).
const chunkSize = 64 << 10

// Result is what a Relay moved and how it ended.
type Result struct {
	// AToB and BToA are the bytes copied each way.
	AToB, BToA int64
	// Err is the first failure that aborted the connection (a read or
	// write error of either side), nil when both directions ended with
	// EOF.
	Err error
}

// Relay copies a's bytes to b and b's to a until both directions ended,
// then closes both. A direction ends cleanly when its source reads EOF:
// the destination's CloseWrite passes the half-close on, and the other
// direction keeps going. A failure of either side (a read or write error,
// a peer's abort) aborts both: each is aborted (Abort, for TCP a reset)
// with the failure as cause, so nothing stays blocked. onData, if not nil,
// is called after each chunk moved (activity), with its size.
func Relay(a, b Conn, onData func(n int)) Result {
	var res Result
	var once sync.Once
	var aToB, bToA atomic.Int64
	fail := func(err error) {
		once.Do(func() {
			res.Err = err
			abort(a, err)
			abort(b, err)
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := pipe(b, a, &aToB, onData); err != nil {
			fail(err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := pipe(a, b, &bToA, onData); err != nil {
			fail(err)
		}
	}()
	wg.Wait()
	res.AToB, res.BToA = aToB.Load(), bToA.Load()
	a.Close()
	b.Close()
	return res
}

// pipe copies src to dst until src's EOF, then half-closes dst and, for a
// src that needs it, waits for the end of the connection (ender).
func pipe(dst, src Conn, n *atomic.Int64, onData func(int)) error {
	buf := make([]byte, chunkSize)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
			n.Add(int64(k))
			if onData != nil {
				onData(k)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
	}
	if err := dst.CloseWrite(); err != nil {
		return err
	}
	if e, ok := src.(ender); ok {
		return e.WaitEnd()
	}
	return nil
}

func abort(c Conn, cause error) {
	if a, ok := c.(aborter); ok {
		a.Abort(cause)
		return
	}
	c.Close()
}

// TCP is a Conn over a TCP connection whose Abort resets it (RST, so its
// peer sees "connection reset" rather than a clean end).
type TCP struct{ *net.TCPConn }

// Abort resets the connection: SO_LINGER 0, then close.
func (c TCP) Abort(error) {
	_ = c.SetLinger(0)
	c.Close()
}
