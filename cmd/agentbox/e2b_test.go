package main

import (
	"flag"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
)

// TestE2BMaxHeaderBytes: the E2B listener (serve --e2b-listen) limits a
// request's headers as the API does (apiserver.MaxHeaderBytes, 64 KiB, not
// Go's default 1 MiB): a request whose headers exceed it gets 431, one
// below it reaches the front (401 without an API key).
func TestE2BMaxHeaderBytes(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv, err := apiserver.NewServer(apiserver.Config{Backend: cliBackend(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	for _, f := range serveE2BFlags() {
		f.Apply(fs)
	}
	if err := fs.Parse([]string{"--e2b-listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	app := cli.NewApp()
	app.ErrWriter = io.Discard // the note about no "base" template
	front, err := serveE2B(cli.NewContext(app, fs, nil), srv, nil, t.TempDir(), auth.New(auth.Config{Admin: token}), slog.New(slog.DiscardHandler))
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
}
