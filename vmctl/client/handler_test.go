package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// TestNewHandler: a client over the API's handler in memory streams
// answers both ways byte-exact, keeps the API's errors, hands the
// request's context (the caller) to the handler, and cancelling a call
// cancels the handler's request.
func TestNewHandler(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	var stored []byte
	cancelled := make(chan struct{})
	var caller string
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			caller = api.CallerFrom(ctx).ID
			started("e1", 1)
			if req.Cmd[0] == "hang" {
				stdout.Write([]byte("first"))
				<-ctx.Done()
				close(cancelled)
				return api.ExitStatus{}, ctx.Err()
			}
			for off := 0; off < len(data); off += 8192 {
				stdout.Write(data[off : off+8192])
			}
			stderr.Write([]byte("e"))
			return api.ExitStatus{ExitCode: 4}, nil
		},
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			p := req.Path
			var err error
			stored, err = io.ReadAll(r)
			return api.FileInfo{Name: "f", Path: p, Type: "file", Size: int64(len(stored)), Mode: "0644"}, err
		},
		GetSandboxFn: func(ctx context.Context, ref string) (api.Sandbox, error) {
			return api.Sandbox{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox %q", ref)
		},
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	cl := client.NewHandler(srv.Handler())
	ctx := api.WithCaller(t.Context(), api.Caller{ID: "token"})

	var stdout, stderr bytes.Buffer
	st, err := cl.Exec(ctx, "w1", api.ExecRequest{Cmd: []string{"gen"}}, &stdout, &stderr)
	if err != nil || st.ExitCode != 4 || !bytes.Equal(stdout.Bytes(), data) || stderr.String() != "e" || caller != "token" {
		t.Fatalf("exec: %v %+v, %d bytes out (equal %v), stderr %q, caller %q", err, st, stdout.Len(), bytes.Equal(stdout.Bytes(), data), stderr.String(), caller)
	}
	if fi, err := cl.Upload(ctx, "w1", "/f", bytes.NewReader(data), 0, false); err != nil || fi.Size != int64(len(data)) || !bytes.Equal(stored, data) {
		t.Fatalf("upload: %v %+v", err, fi)
	}
	// A body of unknown length (a multipart part, a gzip stream: what the
	// E2B data plane forwards) reaches the handler whole, as a chunked one
	// does over a connection: Content-Length 0 with a body means unknown
	// on the client's side, not empty.
	stored = nil
	if fi, err := cl.Upload(ctx, "w1", "/f", io.MultiReader(bytes.NewReader(data)), 0, false); err != nil || fi.Size != int64(len(data)) || !bytes.Equal(stored, data) {
		t.Fatalf("upload of unknown length: %v %+v", err, fi)
	}
	_, err = cl.GetSandbox(ctx, "nope")
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusNotFound || ae.Code != api.CodeNotFound || ae.Message != `no sandbox "nope"` {
		t.Fatalf("get: %v", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	first := make(chan struct{})
	w := writerFunc(func(p []byte) (int, error) {
		select {
		case <-first:
		default:
			close(first)
		}
		return len(p), nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := cl.Exec(cctx, "w1", api.ExecRequest{Cmd: []string{"hang"}}, w, io.Discard)
		done <- err
	}()
	<-first
	cancel()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("cancelling the call did not cancel the handler's request")
	}
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled exec: %v", err)
	}
}
