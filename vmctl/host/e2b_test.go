package host

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// TestE2BMaxHeaderBytes: the E2B listener (serve --e2b-listen) limits a
// request's headers as the API does (apiserver.MaxHeaderBytes, 64 KiB, not
// Go's default 1 MiB): a request whose headers exceed it gets 431, one
// below it reaches the front (401 without an API key).
func TestE2BMaxHeaderBytes(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var said []string // the note about no "base" template
	front, err := newE2BFront(&E2BOptions{Listen: "127.0.0.1:0"}, auth.New(auth.Config{Admin: token}), srv, nil, t.TempDir(), slog.New(slog.DiscardHandler), func(l string) { said = append(said, l) })
	if err != nil {
		t.Fatal(err)
	}
	if front.srv.MaxHeaderBytes != apiserver.MaxHeaderBytes {
		t.Errorf("E2B listener's MaxHeaderBytes = %d, want apiserver.MaxHeaderBytes (%d)", front.srv.MaxHeaderBytes, apiserver.MaxHeaderBytes)
	}
	errc := make(chan error, 1)
	front.serve(errc)
	t.Cleanup(func() { front.shutdown(t.Context()) })

	hc := &http.Client{Timeout: 30 * time.Second}
	for _, tc := range []struct {
		size int
		want int
	}{
		{apiserver.MaxHeaderBytes / 2, http.StatusUnauthorized},
		{apiserver.MaxHeaderBytes + 16<<10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, _ := http.NewRequest("GET", "http://"+front.addr()+"/v2/sandboxes", nil)
		req.Header.Set("X-Big", strings.Repeat("h", tc.size))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%d-byte header: %v", tc.size, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%d-byte header: %d %s, want %d", tc.size, resp.StatusCode, body, tc.want)
		}
	}
	select {
	case err := <-errc:
		t.Fatalf("E2B listener: %v", err)
	default:
	}
	if len(said) != 1 || !strings.HasPrefix(said[0], "note: no template named base") {
		t.Errorf("said %q, want the note about no base template", said)
	}
}

// TestE2BNeedsKey: the E2B front refuses to start without an API key
// (neither the admin's token nor tenants).
func TestE2BNeedsKey(t *testing.T) {
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newE2BFront(&E2BOptions{Listen: "127.0.0.1:0"}, auth.New(auth.Config{Admin: " \n"}), srv, nil, t.TempDir(), slog.New(slog.DiscardHandler), func(string) {})
	if err == nil || err.Error() != "--e2b-listen needs --token-file (or --tenants): its token is the API key E2B clients send (E2B_API_KEY)" {
		t.Errorf("no key: %v", err)
	}
}

// TestE2BTimeouts: the E2B listener bounds how long a client may take to
// send its headers (E2BReadHeaderTimeout) and how long a keep-alive
// connection may wait idle (E2BIdleTimeout). With both shortened (the
// test's only change), a client that trickles its headers byte by byte
// (slowloris) is cut off before any handler sees it, and an idle keep-alive
// connection is closed after its answer.
func TestE2BTimeouts(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	start := func(header, idle time.Duration) *e2bFront {
		front, err := newE2BFront(&E2BOptions{Listen: "127.0.0.1:0"}, auth.New(auth.Config{Admin: token}), srv, nil, t.TempDir(), slog.New(slog.DiscardHandler), func(string) {})
		if err != nil {
			t.Fatal(err)
		}
		if front.srv.ReadHeaderTimeout != E2BReadHeaderTimeout || front.srv.IdleTimeout != E2BIdleTimeout {
			t.Errorf("E2B listener's ReadHeaderTimeout %s, IdleTimeout %s; want %s, %s", front.srv.ReadHeaderTimeout, front.srv.IdleTimeout, E2BReadHeaderTimeout, E2BIdleTimeout)
		}
		if E2BReadHeaderTimeout <= 0 || E2BIdleTimeout <= 0 {
			t.Errorf("E2BReadHeaderTimeout %s, E2BIdleTimeout %s: want both set", E2BReadHeaderTimeout, E2BIdleTimeout)
		}
		front.srv.ReadHeaderTimeout, front.srv.IdleTimeout = header, idle
		front.serve(make(chan error, 1))
		t.Cleanup(func() { front.shutdown(t.Context()) })
		return front
	}
	// readAll reads c until the server closes it, in the background.
	readAll := func(c net.Conn) <-chan string {
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(c)
			got <- string(b)
		}()
		return got
	}
	const guard = time.Minute // a hang, not a speed assertion

	t.Run("slowloris", func(t *testing.T) {
		front := start(300*time.Millisecond, time.Hour)
		c, err := net.Dial("tcp", front.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := readAll(c)
		if _, err := io.WriteString(c, "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		// Trickle one header byte at a time, never ending the headers,
		// until the server has closed the connection.
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("a")); err != nil {
						return
					}
				}
			}
		}()
		// net/http answers a request cut off in its headers with a 400
		// (or nothing) and closes; the handler (401 without a key) never
		// sees it.
		if out := testenv.Receive(t, guard, "the server to cut the slow client off", got); out != "" && !strings.HasPrefix(out, "HTTP/1.1 400 Bad Request\r\n") {
			t.Errorf("the slow client got %q, want the connection closed (after at most a 400)", out)
		}
	})

	t.Run("idle", func(t *testing.T) {
		front := start(time.Hour, 300*time.Millisecond)
		c, err := net.Dial("tcp", front.addr())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Close {
			t.Fatalf("answer %d (close %v), want a keep-alive 401", resp.StatusCode, resp.Close)
		}
		got := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(br)
			got <- string(b)
		}()
		if out := testenv.Receive(t, guard, "the server to close the idle connection", got); out != "" {
			t.Errorf("the idle connection got %q, want it closed", out)
		}
	})
}
