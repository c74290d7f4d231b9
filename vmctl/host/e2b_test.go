package host

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

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
