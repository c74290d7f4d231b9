package guestagent_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

func TestPingSetTimeShutdown(t *testing.T) {
	c, ta := newClient(t)
	ctx := context.Background()
	if d, err := c.Ping(ctx); err != nil || d <= 0 {
		t.Fatalf("Ping = %v, %v", d, err)
	}
	if c.AgentVersion() != "test-1.0" {
		t.Fatalf("version %q", c.AgentVersion())
	}
	want := time.Date(2031, 2, 3, 4, 5, 6, 789, time.UTC)
	if err := c.SetTime(ctx, want); err != nil {
		t.Fatal(err)
	}
	if got := <-ta.clock; !got.Equal(want) {
		t.Fatalf("clock set to %v, want %v", got, want)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestShutdownUnsupported(t *testing.T) {
	ta := startGuest(t, guestagent.Options{})
	c, err := agent.Dial(context.Background(), ta.host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Shutdown(context.Background()); codeOf(err) != agentproto.CodeUnsupported {
		t.Fatalf("got %v", err)
	}
	if err := c.Reboot(context.Background()); codeOf(err) != agentproto.CodeUnsupported {
		t.Fatalf("got %v", err)
	}
}

func TestShutdownHook(t *testing.T) {
	called := make(chan bool, 1)
	ta := startGuest(t, guestagent.Options{Shutdown: func(reboot bool) { called <- reboot }})
	c, err := agent.Dial(context.Background(), ta.host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Reboot(context.Background()); err != nil || !<-called {
		t.Fatalf("Reboot: %v", err)
	}
}

func TestStaleBytesBeforeHandshake(t *testing.T) {
	ta := startGuest(t, guestagent.Options{})
	// Stale host→guest bytes: half a yamux frame and a broken hello of an
	// earlier session, still in the port when the guest starts reading.
	io.WriteString(ta.host, "\x00\x00\x00\x01\x00\x00garbage AGENTBOX/2 HELLO\nAGENTBOX/2 HEL")
	// Stale guest→host bytes: an earlier session's yamux frames.
	io.WriteString(ta.guest, "\x00\x01\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00AGENTBOX/2 OK oldnonce v0\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, ta.host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, c, argv("echo", "ok"), nil)
	if r.err != nil || r.stdout != "ok\n" {
		t.Fatalf("got %+v", r)
	}
	c.Close()
	if err := <-ta.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestGuestVersionMismatch(t *testing.T) {
	ta := startGuest(t, guestagent.Options{})
	io.WriteString(ta.host, "AGENTBOX/4 HELLO abc\n")
	line, err := bufio.NewReader(ta.host).ReadString('\n')
	want := "AGENTBOX/3 ERR abc guest agent speaks protocol 3, host 4: rebuild the image with a matching agentbox-guest\n"
	if err != nil || line != want {
		t.Fatalf("reply %q, %v", line, err)
	}
	if err := <-ta.served; !errors.Is(err, agentproto.ErrVersionMismatch) {
		t.Fatalf("Serve: %v", err)
	}
}

func TestDialHonoursContext(t *testing.T) {
	host, guest := testenv.SocketPair(t)
	defer guest.Close() // a guest that never answers
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := agent.Dial(ctx, host, agent.Options{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	host2, guest2 := testenv.SocketPair(t)
	defer guest2.Close()
	go func() {
		// Cancel once the hello arrived, while Dial waits for the reply.
		bufio.NewReader(guest2).ReadString('\n')
		cancel()
	}()
	if _, err := agent.Dial(ctx, host2, agent.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}

func TestServeContextCancel(t *testing.T) {
	host, guest := testenv.SocketPair(t)
	defer host.Close()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- guestagent.Serve(ctx, guest, guestagent.Options{}) }()
	c, err := agent.Dial(context.Background(), host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Start(context.Background(), argv("sleep", "1000"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("Serve: %v", err)
	}
	waitGone(t, p.Pid())
	if _, err := p.Wait(); !errors.Is(err, agent.ErrDisconnected) {
		t.Fatalf("Wait: %v", err)
	}
	if !strings.Contains(c.AgentVersion(), "unknown") {
		t.Fatalf("version %q", c.AgentVersion())
	}
}
