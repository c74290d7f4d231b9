package guestagent_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// listenLoopback listens on 127.0.0.1 (the in-process agent's "guest
// loopback") and returns the port; serve handles each connection.
func listenLoopback(t *testing.T, serve func(c *net.TCPConn)) int {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// freePort returns a loopback port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

func connect(t *testing.T, c *agent.Client, port int) *agentproto.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := c.Connect(ctx, port)
	if err != nil {
		t.Fatalf("Connect %d: %v", port, err)
	}
	return conn
}

// noStreams waits until the session has no stream left.
func noStreams(t *testing.T, c *agent.Client) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, "no agent stream left", func() bool { return c.Streams() == 0 })
}

// TestConnectHalfClose: bytes both ways byte for byte, the host's
// half-close reaches the guest's server as EOF while its answer still
// flows back, and both ends close cleanly.
func TestConnectHalfClose(t *testing.T) {
	c, _ := newClient(t)
	reply := make([]byte, 5<<20)
	rand.Read(reply)
	port := listenLoopback(t, func(s *net.TCPConn) {
		defer s.Close()
		h := sha256.New()
		if _, err := io.Copy(h, s); err != nil {
			return
		}
		s.Write(h.Sum(nil))
		s.Write(reply)
	})
	conn := connect(t, c, port)
	sent := make([]byte, 3<<20+17)
	rand.Read(sent)
	go func() {
		conn.Write(sent)
		conn.CloseWrite()
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	sum := sha256.Sum256(sent)
	if !bytes.Equal(got[:32], sum[:]) || !bytes.Equal(got[32:], reply) {
		t.Fatalf("got %d bytes; want the sha256 of what was sent and the %d-byte reply", len(got), len(reply))
	}
	if err := conn.WaitEnd(); err != nil {
		t.Fatalf("WaitEnd after both ends: %v", err)
	}
	conn.Close()
	noStreams(t, c)
}

// TestConnectRefused: a port nobody listens on is a clear error and
// leaves no stream.
func TestConnectRefused(t *testing.T) {
	c, _ := newClient(t)
	port := freePort(t)
	_, err := c.Connect(context.Background(), port)
	var pe *agentproto.Error
	if !errors.As(err, &pe) || pe.Code != agentproto.CodeNotFound || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Connect to a closed port: %v; want not-found, connection refused", err)
	}
	if _, err := c.Connect(context.Background(), 0); !errors.As(err, &pe) || pe.Code != agentproto.CodeInvalid {
		t.Fatalf("Connect to port 0: %v; want invalid", err)
	}
	noStreams(t, c)
}

// TestConnectAbort: a reset on either side reaches the other as an
// error, never as a clean EOF.
func TestConnectAbort(t *testing.T) {
	c, _ := newClient(t)
	serverErr := make(chan error, 1)
	var reset atomic.Bool
	port := listenLoopback(t, func(s *net.TCPConn) {
		if reset.Load() {
			// After a byte of the client's: a reset before connect()
			// returned in the guest would be the dial's error.
			s.Read(make([]byte, 1))
			s.Write([]byte("partial"))
			s.Read(make([]byte, 1)) // the client read it
			s.SetLinger(0)
			s.Close()
			return
		}
		_, err := io.Copy(io.Discard, s)
		serverErr <- err
		s.Close()
	})

	// The host aborts: the guest's server reads a reset, not EOF.
	conn := connect(t, c, port)
	conn.Write([]byte("hello"))
	conn.Abort(errors.New("client went away"))
	select {
	case err := <-serverErr:
		if err == nil {
			t.Fatal("the guest's server read a clean EOF after the host aborted")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the guest's server still reads 10 s after the host aborted")
	}
	noStreams(t, c)

	// The guest's server resets: the host reads an error after the bytes.
	reset.Store(true)
	conn = connect(t, c, port)
	conn.Write([]byte("g"))
	got := make([]byte, 7)
	if _, err := io.ReadFull(conn, got); err != nil || string(got) != "partial" {
		t.Fatalf("read before the guest's reset: %q, %v", got, err)
	}
	conn.Write([]byte("o"))
	if rest, err := io.ReadAll(conn); err == nil || len(rest) != 0 {
		t.Fatalf("read after the guest's reset: %q, %v; want an error", rest, err)
	}
	conn.Close()
	noStreams(t, c)
}
