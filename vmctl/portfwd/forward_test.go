package portfwd_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/portfwd"
)

// guest is an in-process guest agent (its "loopback" is this host's) and
// the host's client of it.
func guest(t *testing.T) *agent.Client {
	t.Helper()
	host, g := testenv.SocketPair(t)
	served := make(chan error, 1)
	go func() { served <- guestagent.Serve(context.Background(), g, guestagent.Options{Version: "test"}) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, host, agent.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c
}

func dialer(c *agent.Client) func(context.Context, int) (portfwd.Conn, error) {
	return func(ctx context.Context, port int) (portfwd.Conn, error) {
		conn, err := c.Connect(ctx, port)
		if err != nil {
			return nil, err
		}
		return conn, nil
	}
}

// TestForwardHTTP: an HTTP server behind a forward, 20 concurrent
// downloads byte for byte, a guest port nobody listens on resets the
// client's connection, Close leaves no stream and no goroutine.
func TestForwardHTTP(t *testing.T) {
	c := guest(t)
	if _, err := c.Ping(context.Background()); err != nil { // both sessions run now
		t.Fatal(err)
	}
	before := runtime.NumGoroutine() // with the agent session, before any forward or server
	body := make([]byte, 4<<20)
	rand.Read(body)
	want := sha256.Sum256(body)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) })}
	go srv.Serve(ln)
	defer srv.Close()

	var ends sync.WaitGroup
	f, err := portfwd.Listen(portfwd.Options{
		GuestPort: ln.Addr().(*net.TCPAddr).Port, HostAddr: "127.0.0.1:0", Dial: dialer(c),
		OnEnd: func(portfwd.ConnResult) { ends.Done() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ends.Add(20)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Minute}
			resp, err := cl.Get("http://" + f.Addr() + "/")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			h := sha256.New()
			io.Copy(h, resp.Body)
			if got := h.Sum(nil); string(got) != string(want[:]) {
				errs <- fmt.Errorf("download: sha256 %x, want %x", got, want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ends.Wait()
	s := f.Stats()
	if s.Connections != 20 || s.Active != 0 || s.Failed != 0 || s.BytesOut < 20*int64(len(body)) {
		t.Errorf("stats %+v: want 20 connections, none active or failed, ≥ 20 bodies out", s)
	}

	// Nobody listens: the client's connection is reset at once.
	nl, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := nl.Addr().(*net.TCPAddr).Port
	nl.Close()
	g, err := portfwd.Listen(portfwd.Options{GuestPort: closedPort, HostAddr: "127.0.0.1:0", Dial: dialer(c),
		OnEnd: func(portfwd.ConnResult) { ends.Done() }})
	if err != nil {
		t.Fatal(err)
	}
	ends.Add(1)
	// The reset may come before connect(2) returned: then it is Dial's.
	if conn, err := net.Dial("tcp", g.Addr()); err == nil {
		conn.SetDeadline(time.Now().Add(20 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("read from a forward to a closed guest port: %d, %v; want a reset", n, err)
		}
		conn.Close()
	} else if !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("dial a forward to a closed guest port: %v; want a reset", err)
	}
	ends.Wait()
	if s := g.Stats(); s.Connections != 1 || s.Failed != 1 || s.Active != 0 || s.LastError == "" {
		t.Errorf("stats %+v: want 1 failed connection with its error", s)
	}

	// The address in use: a clear conflict.
	if _, err := portfwd.Listen(portfwd.Options{GuestPort: 1, HostAddr: g.Addr(), Dial: dialer(c)}); !errors.Is(err, portfwd.ErrAddrInUse) || !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Listen on a taken address: %v; want ErrAddrInUse (conflict)", err)
	}
	if _, err := portfwd.Listen(portfwd.Options{GuestPort: 1, HostAddr: "localhost:80", Dial: dialer(c)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Listen on a name: %v; want invalid argument", err)
	}

	// Close with a connection open: it is reset, nothing is left.
	ends.Add(1)
	open, err := net.Dial("tcp", f.Addr())
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "the connection to be carried", func() bool { return f.Stats().Active == 1 })
	f.Close()
	g.Close()
	ends.Wait()
	open.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := open.Read(make([]byte, 1)); err == nil {
		t.Error("a connection still reads after its forward closed")
	}
	open.Close()
	if _, err := net.Dial("tcp", f.Addr()); err == nil {
		t.Error("the forward's address still accepts after Close")
	}
	testenv.WaitFor(t, 20*time.Second, "no agent stream left", func() bool { return c.Streams() == 0 })
	srv.Close()
	var n int
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n = runtime.NumGoroutine(); n <= before {
			break
		}
	}
	if n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left, %d before the forwards:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
