package host

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// TestListener: the API server serves vmctl/client over the in-memory
// listener, naming the caller by uid like its unix socket.
func TestListener(t *testing.T) {
	var caller string
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			caller = api.CallerFrom(ctx).ID
			started("e1", 7)
			io.WriteString(stdout, req.Cmd[1])
			return api.ExitStatus{ExitCode: 3}, nil
		},
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	ln := NewListener()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	cl := client.New("", client.WithHTTPClient(&http.Client{Transport: &http.Transport{DialContext: ln.DialContext}}))
	if _, err := cl.CreateSandbox(t.Context(), api.CreateSandboxRequest{Image: "/img", Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	st, err := cl.Exec(t.Context(), "w1", api.ExecRequest{Cmd: []string{"out", "hello", "", "3"}}, &out, io.Discard)
	if err != nil || st.ExitCode != 3 || out.String() != "hello" {
		t.Errorf("exec: %+v %q %v", st, out.String(), err)
	}
	if want := fmt.Sprintf("uid:%d", os.Getuid()); caller != want {
		t.Errorf("caller %q, want %q", caller, want)
	}
	cl.Close()
	if err := srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := ln.DialContext(t.Context(), "", ""); err == nil {
		t.Error("dial after Close succeeded")
	}
}
