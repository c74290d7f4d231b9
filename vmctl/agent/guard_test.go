package agent_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// frame is one raw yamux header (hashicorp/yamux const.go): what a hostile
// guest writes below the session.
func frame(version, typ uint8, flags uint16, stream, length uint32) []byte {
	h := make([]byte, 12)
	h[0], h[1] = version, typ
	binary.BigEndian.PutUint16(h[2:4], flags)
	binary.BigEndian.PutUint32(h[4:8], stream)
	binary.BigEndian.PutUint32(h[8:12], length)
	return h
}

const (
	typData, typWindow, typPing = 0, 1, 2
	flagSYN, flagACK            = 1, 2
)

// hostileDial dials a guest that answers the handshake and then runs
// guest on the raw connection (its buffered reader and the conn).
func hostileDial(t *testing.T, guest func(br *bufio.Reader, conn net.Conn)) *agent.Client {
	t.Helper()
	host, g := net.Pipe()
	t.Cleanup(func() { g.Close() })
	go func() {
		br := bufio.NewReader(g)
		if _, err := agentproto.AcceptHello(br, g, "hostile"); err != nil {
			return
		}
		guest(br, g)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := agent.Dial(ctx, host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// violated waits for the session's end and returns its violation, which
// must wrap agentproto.ErrProtocolViolation and be of ErrUnavailable.
func violated(t *testing.T, c *agent.Client) error {
	t.Helper()
	testenv.Receive(t, time.Minute, "the session to end", c.Done())
	err := c.Violation()
	if !errors.Is(err, agentproto.ErrProtocolViolation) || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Fatalf("violation %v", err)
	}
	return err
}

// A guest that floods pings and never reads what the host answers is cut
// off at the fifth unanswered ping, and the host's goroutines come back
// to what they were: hashicorp/yamux would otherwise leave one blocked
// goroutine per ping.
func TestGuestPingFlood(t *testing.T) {
	before := runtime.NumGoroutine()
	wrote := make(chan int, 1)
	c := hostileDial(t, func(_ *bufio.Reader, conn net.Conn) {
		n := 0
		for ; n < 100000; n++ {
			if _, err := conn.Write(frame(0, typPing, flagSYN, 0, uint32(n))); err != nil {
				break
			}
		}
		wrote <- n
	})
	err := violated(t, c)
	want := "agent protocol violation: the guest sent 5 pings the host has not answered yet, more than the limit of 4 (it does not read what the host writes) (yamux frame type 2 flags 0x1 stream 0 length 4); the host closed the session"
	if err.Error() != want {
		t.Fatalf("violation %q, want %q", err, want)
	}
	if n := testenv.Receive(t, time.Minute, "the guest's writes to fail", wrote); n >= 100000 {
		t.Fatalf("the host read all %d pings", n)
	}
	c.Close()
	testenv.WaitFor(t, time.Minute, "the host's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
	// An operation after it says why.
	if _, err := c.Stat(context.Background(), "/x"); !errors.Is(err, agent.ErrDisconnected) || !errors.Is(err, agentproto.ErrProtocolViolation) {
		t.Fatalf("stat after the violation: %v", err)
	}
}

// A guest that pings and reads each answer may ping for ever: the bound
// is on unanswered pings, not on pings.
func TestGuestPingsAnswered(t *testing.T) {
	done := make(chan error, 1)
	c := hostileDial(t, func(br *bufio.Reader, conn net.Conn) {
		ack := make([]byte, 12)
		for n := 0; n < 1000; n++ {
			if _, err := conn.Write(frame(0, typPing, flagSYN, 0, uint32(n))); err != nil {
				done <- err
				return
			}
			if _, err := io.ReadFull(br, ack); err != nil {
				done <- err
				return
			}
			if want := frame(0, typPing, flagACK, 0, uint32(n)); string(ack) != string(want) {
				done <- errors.New("answer " + string(ack))
				return
			}
		}
		done <- nil
	})
	if err := testenv.Receive(t, time.Minute, "1000 pings answered", done); err != nil {
		t.Fatal(err)
	}
	if err := c.Violation(); err != nil {
		t.Fatal(err)
	}
}

// A guest that opens streams (it never needs to: only the host does) is
// cut off at the first, whatever the frame carries.
func TestGuestOpensStreams(t *testing.T) {
	before := runtime.NumGoroutine()
	for _, typ := range []uint8{typWindow, typData} {
		c := hostileDial(t, func(_ *bufio.Reader, conn net.Conn) {
			for n := uint32(2); n < 20000; n += 2 {
				if _, err := conn.Write(frame(0, typ, flagSYN, n, 0)); err != nil {
					return
				}
			}
		})
		err := violated(t, c)
		if !strings.Contains(err.Error(), "the guest sent a stream it opened (only the host opens streams) (yamux frame type "+string('0'+rune(typ))+" flags 0x1 stream 2 length 0)") {
			t.Fatalf("violation %q", err)
		}
		if c.Streams() != 0 {
			t.Fatalf("%d streams", c.Streams())
		}
		c.Close()
	}
	testenv.WaitFor(t, time.Minute, "the host's goroutines to end", func() bool { return runtime.NumGoroutine() <= before })
}

// Malformed frames end the session with the rule they broke.
func TestGuestMalformedFrames(t *testing.T) {
	for _, tc := range []struct {
		name string
		hdr  []byte
		want string
	}{
		{"version", frame(1, typData, 0, 1, 0), "yamux version 1, not 0 (yamux frame type 0 flags 0x0 stream 1 length 0)"},
		{"type", frame(0, 4, 0, 1, 0), "an unknown frame type (yamux frame type 4"},
		{"flags", frame(0, typWindow, 1<<4, 1, 0), "unknown flags (yamux frame type 1 flags 0x10"},
		{"stream 0", frame(0, typData, 0, 0, 1), "a stream frame for stream 0"},
		{"oversize", frame(0, typData, 0, 1, agentproto.MaxGuestDataFrame+1), "a data frame of 4194305 bytes, more than the limit of 4194304"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hostileDial(t, func(_ *bufio.Reader, conn net.Conn) { conn.Write(tc.hdr) })
			if err := violated(t, c); !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("violation %q, want %q", err, tc.want)
			}
		})
	}
}

// The guard follows frame boundaries across any chunking: a data frame's
// body that looks like a bad header is body, and a header split across
// reads is checked whole.
func TestGuardFrameBoundaries(t *testing.T) {
	host, guest := net.Pipe()
	defer guest.Close()
	g := agentproto.GuardHost(host)
	body := frame(9, 9, 0xffff, 0, 0xffffffff) // a bad header, as body bytes
	var in []byte
	in = append(in, frame(0, typData, 0, 1, uint32(len(body)))...)
	in = append(in, body...)
	in = append(in, frame(0, typWindow, flagACK, 1, 5)...)
	in = append(in, frame(0, typData, flagSYN, 2, 0)...)
	go func() {
		for _, b := range in {
			if _, err := guest.Write([]byte{b}); err != nil {
				return
			}
		}
	}()
	got := 0
	buf := make([]byte, 1)
	for {
		n, err := g.Read(buf)
		got += n
		if err != nil {
			if !errors.Is(err, agentproto.ErrProtocolViolation) || !strings.Contains(err.Error(), "a stream it opened") {
				t.Fatalf("read %d bytes, then %v", got, err)
			}
			break
		}
	}
	if want := len(in) - 1; got != want { // the SYN header's last byte is refused
		t.Fatalf("read %d bytes, want %d", got, want)
	}
	if _, err := g.Read(buf); !errors.Is(err, agentproto.ErrProtocolViolation) {
		t.Fatalf("read after the violation: %v", err)
	}
}

// TestGuestStopsTakingData: a guest that reads the connection but never
// grants a stream window (it stopped serving its streams) makes a write
// fail with ErrStalled after the stall timeout instead of holding the
// host's operation for ever; the session stays up.
func TestGuestStopsTakingData(t *testing.T) {
	host, g := net.Pipe()
	t.Cleanup(func() { g.Close() })
	go func() {
		br := bufio.NewReader(g)
		if _, err := agentproto.AcceptHello(br, g, "hostile"); err != nil {
			return
		}
		io.Copy(io.Discard, br) // reads every byte, answers nothing
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := agent.Dial(ctx, host, agent.Options{StallTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	err = c.WriteFile(ctx, "/tmp/big", strings.NewReader(strings.Repeat("x", 8<<20)), 0o644)
	if !errors.Is(err, agent.ErrStalled) || !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WriteFile into a guest that takes nothing: %v", err)
	}
	if !strings.Contains(err.Error(), "agent: write /tmp/big: agent: the guest stopped taking data: it took no bytes for 200ms") {
		t.Fatalf("message: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("the session ended")
	default:
	}
}
