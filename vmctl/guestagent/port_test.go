package guestagent_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// fakePort simulates the guest end of a QEMU virtio-serial port: bytes from
// hosts queue up and persist across host connections; with no host
// connected and nothing queued, Read returns EOF at once; guest writes
// while no host is connected are dropped.
type fakePort struct {
	mu        sync.Mutex
	cond      *sync.Cond
	in        bytes.Buffer // host → guest
	connected bool
	out       net.Conn // current host's bridge end
	deadline  time.Time
	eofReads  int
	paused    bool // Read blocks, as a guest whose reader is not scheduled
	bridges   int  // running bridge goroutines (0 or 1)
}

func newFakePort() *fakePort {
	p := &fakePort{}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// connect attaches a new host and returns its end of the connection.
// Everything the host writes is queued before the disconnect is visible.
// Like QEMU's chardev server it serves one host at a time: it first waits
// until the previous host's bytes are all queued and its disconnect seen.
func (p *fakePort) connect() net.Conn {
	p.waitFor(func() bool { return p.bridges == 0 })
	host, bridge := net.Pipe()
	p.mu.Lock()
	p.connected, p.out = true, bridge
	p.bridges++
	p.mu.Unlock()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := bridge.Read(buf)
			p.mu.Lock()
			p.in.Write(buf[:n])
			if err != nil {
				p.connected, p.out = false, nil
				p.bridges--
			}
			p.cond.Broadcast()
			p.mu.Unlock()
			if err != nil {
				bridge.Close()
				return
			}
		}
	}()
	return host
}

// waitFor blocks until cond (called with the lock held) holds.
func (p *fakePort) waitFor(cond func() bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !cond() {
		p.cond.Wait()
	}
}

// setPaused stops or resumes the guest's reads.
func (p *fakePort) setPaused(v bool) {
	p.mu.Lock()
	p.paused = v
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *fakePort) Read(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if !p.deadline.IsZero() && !time.Now().Before(p.deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		if p.paused {
			p.cond.Wait()
			continue
		}
		if p.in.Len() > 0 {
			return p.in.Read(b)
		}
		if !p.connected {
			p.eofReads++
			p.cond.Broadcast()
			return 0, io.EOF
		}
		p.cond.Wait()
	}
}

func (p *fakePort) Write(b []byte) (int, error) {
	p.mu.Lock()
	out := p.out
	p.mu.Unlock()
	if out != nil {
		out.Write(b) // a host that went away drops the bytes
	}
	return len(b), nil
}

func (p *fakePort) SetDeadline(t time.Time) error {
	p.mu.Lock()
	p.deadline = t
	p.cond.Broadcast()
	p.mu.Unlock()
	return nil
}

func dialPort(t *testing.T, p *fakePort) *agent.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, p.connect(), agent.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	return c
}

func TestServePortReconnect(t *testing.T) {
	port := newFakePort()
	// A host that wrote half a hello and left before the guest started,
	// and one that wrote a whole hello and timed out.
	h := port.connect()
	io.WriteString(h, "AGENTBOX/3 HEL")
	h.Close()
	h = port.connect()
	io.WriteString(h, "AGENTBOX/3 HELLO timedout\n")
	h.Close()
	port.waitFor(func() bool { return !port.connected })

	ctx, cancel := context.WithCancel(context.Background())
	sessions := make(chan error, 10)
	served := make(chan error, 1)
	go func() {
		served <- guestagent.ServePort(ctx, port, guestagent.Options{}, func(err error) { sessions <- err })
	}()

	// The stale bytes are consumed, then the idle port reads EOF; the
	// guest keeps polling the same port and serves the hosts below.
	port.waitFor(func() bool { return port.eofReads > 0 && port.in.Len() == 0 })
	for i := range 3 {
		c := dialPort(t, port)
		r := run(t, c, argv("echo", "session", string(rune('0'+i))), nil)
		if r.err != nil || r.stdout != "session "+string(rune('0'+i))+"\n" {
			t.Fatalf("session %d: %+v", i, r)
		}
		c.Close()
		if err := <-sessions; err != nil {
			t.Fatalf("session %d ended with %v", i, err)
		}
	}
	// The stale hello was answered in a session of its own or in the
	// first host's; either way no error reached onSession above.
	cancel()
	if err := <-served; !errors.Is(err, context.Canceled) {
		t.Fatalf("ServePort: %v", err)
	}
}

func TestServePortHostGoneMidCommand(t *testing.T) {
	port := newFakePort()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := make(chan error, 10)
	go guestagent.ServePort(ctx, port, guestagent.Options{}, func(err error) { sessions <- err })

	c := dialPort(t, port)
	p, err := c.Start(context.Background(), argv("sleep", "1000"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // the host disappears: the port reads EOF
	if err := <-sessions; err != nil {
		t.Fatalf("session ended with %v", err)
	}
	waitGone(t, p.Pid())
	c = dialPort(t, port)
	defer c.Close()
	r := run(t, c, argv("true"), nil)
	if r.err != nil || r.status.Code != 0 {
		t.Fatalf("after reconnect: %+v", r)
	}
}

func TestServePortQueuedHellos(t *testing.T) {
	port := newFakePort()
	h := port.connect()
	io.WriteString(h, "AGENTBOX/3 HELLO gaveup\n")
	h.Close()
	// The next host's hello is queued behind the stale one before the
	// guest reads anything.
	dialed := make(chan *agent.Client, 1)
	go func() {
		c, err := agent.Dial(context.Background(), port.connect(), agent.Options{})
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	want := len("AGENTBOX/3 HELLO gaveup\n") + len("AGENTBOX/3 HELLO ") + 32 + 1
	port.waitFor(func() bool { return port.in.Len() == want })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go guestagent.ServePort(ctx, port, guestagent.Options{}, nil)
	c := <-dialed
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	r := run(t, c, argv("echo", "ok"), nil)
	if r.err != nil || strings.TrimSpace(r.stdout) != "ok" {
		t.Fatalf("got %+v", r)
	}
}

// TestServePortFastReconnect: the host leaves and the next one connects
// and says hello before the guest's reader ran, so the guest never reads
// the EOF in between and finds the hello where a yamux frame should start.
func TestServePortFastReconnect(t *testing.T) {
	port := newFakePort()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sessions := make(chan error, 10)
	go guestagent.ServePort(ctx, port, guestagent.Options{}, func(err error) { sessions <- err })

	c := dialPort(t, port)
	if r := run(t, c, argv("echo", "one"), nil); r.err != nil || r.stdout != "one\n" {
		t.Fatalf("first host: %+v", r)
	}
	port.setPaused(true)
	c.Close()
	port.waitFor(func() bool { return !port.connected })
	dialed := make(chan *agent.Client, 1)
	go func() {
		c, err := agent.Dial(context.Background(), port.connect(), agent.Options{})
		if err != nil {
			t.Error(err)
		}
		dialed <- c
	}()
	port.waitFor(func() bool { return port.in.Len() > 0 })
	port.setPaused(false)
	c = <-dialed
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	if err := <-sessions; err != nil {
		t.Fatalf("first session ended with %v", err)
	}
	if r := run(t, c, argv("echo", "two"), nil); r.err != nil || r.stdout != "two\n" {
		t.Fatalf("second host: %+v", r)
	}
}
