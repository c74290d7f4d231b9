package agentproto

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrProtocolViolation is wrapped by the error of a session whose guest
// sent the host something the protocol does not allow (see [GuardHost]:
// a ping flood, a stream it opened, a malformed or oversize yamux frame):
// the host closes the session at the first such frame. It is of
// errdefs.ErrUnavailable (the guest cannot be used any more) with the
// reason "agent_protocol_violation", which vmctl/sandbox records as the
// failed sandbox's reason.
var ErrProtocolViolation = errdefs.New(errdefs.ErrUnavailable, "agent_protocol_violation", "agent protocol violation")

// Limits the host puts on the yamux frames a guest sends (see [GuardHost]).
const (
	// MaxGuestPings is how many yamux pings (SYN) of the guest may wait at
	// once for the host's answer (the ACK the host has not yet written).
	// Neither side's agent pings (YamuxConfig disables keepalives); the
	// bound exists because hashicorp/yamux v0.1.2 answers each ping from
	// a goroutine of its own that waits until the answer is queued: a
	// guest that pings and stops reading would otherwise pin one
	// goroutine per 12-byte frame on the host.
	MaxGuestPings = 4
	// MaxGuestDataFrame is the largest yamux data frame body a guest may
	// send, in bytes: the stream window ([StreamWindow]), more than which
	// yamux would refuse anyway, once it had read it.
	MaxGuestDataFrame = StreamWindow
)

// yamux's frame header (hashicorp/yamux const.go, spec.md): version
// (uint8, 0), type (uint8), flags (uint16), stream ID (uint32), length
// (uint32), all big-endian. The length is a data frame's body size, a
// window update's delta, a ping's opaque value, a go-away's code.
const (
	yamuxHeaderSize          = 12
	yamuxVersion      uint8  = 0
	yamuxData         uint8  = 0
	yamuxWindowUpdate uint8  = 1
	yamuxPing         uint8  = 2
	yamuxGoAway       uint8  = 3
	yamuxSYN          uint16 = 1 << 0
	yamuxACK          uint16 = 1 << 1
	yamuxFlags        uint16 = 1<<4 - 1 // SYN, ACK, FIN, RST
)

// GuardHost wraps conn, the host's end of an agent session once the
// handshake is done (the yamux client's connection), so that the bytes the
// guest sends are checked frame by frame before hashicorp/yamux sees them.
// The first frame that breaks one of these rules fails the read with an
// error wrapping [ErrProtocolViolation] that names the frame and the
// limit; yamux then closes the session and the connection, and every
// later read fails the same way ([Guard.Err] returns it):
//
//   - the version is 0 and the type one of data, window update, ping,
//     go-away; no flag but SYN, ACK, FIN, RST is set;
//   - no data or window-update frame carries SYN (the host is the only
//     side that opens streams: a guest-opened stream would sit in yamux's
//     accept backlog with its window, never accepted) or names stream 0;
//   - a data frame's body is at most [MaxGuestDataFrame] bytes;
//   - at most [MaxGuestPings] of the guest's pings are unanswered (the
//     guard counts the ping ACKs the host writes).
//
// Everything else (frames for streams that are gone, window updates,
// go-aways) is yamux's to handle and costs the host no more than reading
// it.
func GuardHost(conn net.Conn) *Guard { return &Guard{Conn: conn} }

// Guard is the connection [GuardHost] returns. Read and Write are safe for
// one reader and one writer at a time, as yamux uses them.
type Guard struct {
	net.Conn
	in, out frameScan
	pings   atomic.Int64 // guest pings read whose ACK is not yet written
	mu      sync.Mutex
	err     error
}

// Read reads from the wrapped connection and checks the frames it
// carries; see [GuardHost].
func (g *Guard) Read(p []byte) (int, error) {
	if err := g.Err(); err != nil {
		return 0, err
	}
	n, err := g.Conn.Read(p)
	if verr := g.in.scan(p[:n], g.checkIn); verr != nil {
		g.mu.Lock()
		if g.err == nil {
			g.err = verr
		}
		verr = g.err
		g.mu.Unlock()
		return 0, verr
	}
	return n, err
}

// Write writes to the wrapped connection, counting the ping answers it
// carries.
func (g *Guard) Write(p []byte) (int, error) {
	n, err := g.Conn.Write(p)
	_ = g.out.scan(p[:n], g.checkOut)
	return n, err
}

// Err returns the violation that ended the session (wrapping
// [ErrProtocolViolation]), or nil.
func (g *Guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// checkIn is the rule for one header the guest sent.
func (g *Guard) checkIn(h []byte) error {
	typ, flags, id, length := h[1], binary.BigEndian.Uint16(h[2:4]), binary.BigEndian.Uint32(h[4:8]), binary.BigEndian.Uint32(h[8:12])
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: the guest sent %s (yamux frame type %d flags %#x stream %d length %d); the host closed the session",
			ErrProtocolViolation, fmt.Sprintf(format, args...), typ, flags, id, length)
	}
	switch {
	case h[0] != yamuxVersion:
		return bad("yamux version %d, not %d", h[0], yamuxVersion)
	case typ > yamuxGoAway:
		return bad("an unknown frame type")
	case flags&^yamuxFlags != 0:
		return bad("unknown flags")
	}
	switch typ {
	case yamuxData, yamuxWindowUpdate:
		switch {
		case flags&yamuxSYN != 0:
			return bad("a stream it opened (only the host opens streams)")
		case id == 0:
			return bad("a stream frame for stream 0")
		case typ == yamuxData && length > MaxGuestDataFrame:
			return bad("a data frame of %d bytes, more than the limit of %d", length, MaxGuestDataFrame)
		}
	case yamuxPing:
		if flags&yamuxSYN != 0 {
			if n := g.pings.Add(1); n > MaxGuestPings {
				return bad("%d pings the host has not answered yet, more than the limit of %d (it does not read what the host writes)", n, MaxGuestPings)
			}
		}
	}
	return nil
}

// checkOut counts the ping answers of one header the host wrote.
func (g *Guard) checkOut(h []byte) error {
	if h[1] == yamuxPing && binary.BigEndian.Uint16(h[2:4])&yamuxACK != 0 {
		g.pings.Add(-1)
	}
	return nil
}

// frameScan follows yamux frame boundaries across the chunks of one
// direction of a connection.
type frameScan struct {
	hdr  [yamuxHeaderSize]byte
	have int    // bytes of hdr read so far
	body uint32 // bytes of the current data frame's body still to come
}

// scan passes over p, calling check with each complete header; it stops
// at check's first error.
func (s *frameScan) scan(p []byte, check func(h []byte) error) error {
	for len(p) > 0 {
		if s.body > 0 {
			k := uint32(len(p))
			if k > s.body {
				k = s.body
			}
			s.body -= k
			p = p[k:]
			continue
		}
		k := copy(s.hdr[s.have:], p)
		s.have += k
		p = p[k:]
		if s.have < yamuxHeaderSize {
			return nil
		}
		s.have = 0
		if err := check(s.hdr[:]); err != nil {
			return err
		}
		if s.hdr[1] == yamuxData {
			s.body = binary.BigEndian.Uint32(s.hdr[8:12])
		}
	}
	return nil
}
