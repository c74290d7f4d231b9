package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver/apitest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// stdinBackend is a backend whose one detached process echoes its stdin
// to its stdout and exits 3 at stdin's EOF.
type stdinBackend struct {
	apitest.Backend
	mu     sync.Mutex
	req    api.ExecRequest
	stdin  bytes.Buffer
	closed bool
	eof    chan struct{}
	killed chan string
}

func newStdinBackend() *stdinBackend {
	b := &stdinBackend{eof: make(chan struct{}), killed: make(chan string, 1)}
	b.StartProcessFn = func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
		b.mu.Lock()
		b.req = req
		b.mu.Unlock()
		return apitest.Process("p7"), nil
	}
	b.WriteStdinFn = func(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		n, err := io.Copy(&b.stdin, r)
		if err == nil && closeAfter {
			b.closed = true
			close(b.eof)
		}
		return n, err
	}
	b.ProcessOutputFn = func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
		select {
		case <-b.eof:
		case <-ctx.Done():
			return nil
		}
		b.mu.Lock()
		data := bytes.Clone(b.stdin.Bytes())
		b.mu.Unlock()
		if err := emit(api.ExecEvent{Type: api.EventStdout, Data: data}); err != nil {
			return err
		}
		return emit(api.ExecEvent{Type: api.EventExit, Exit: &api.ExitStatus{ExitCode: 3}})
	}
	b.KillProcessFn = func(ctx context.Context, ref, pid, signal string) error {
		b.killed <- pid + " " + signal
		return nil
	}
	return b
}

func TestExecWithStdin(t *testing.T) {
	b := newStdinBackend()
	c := start(t, &b.Backend)
	var out bytes.Buffer
	st, err := c.ExecWithStdin(context.Background(), "w", api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader("abc"), &out, io.Discard)
	if err != nil || st.ExitCode != 3 || out.String() != "abc" {
		t.Fatalf("ExecWithStdin = %+v, %v, output %q; want exit 3, output abc", st, err, out.String())
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.req.StdinOpen || !b.closed {
		t.Errorf("process started with StdinOpen=%v, stdin closed=%v; want both", b.req.StdinOpen, b.closed)
	}
}

// TestExecWithStdinCancel: a cancelled ctx kills the process, and the
// error says so (wrapping ctx's); a failed kill is joined as *KillError.
func TestExecWithStdinCancel(t *testing.T) {
	for _, killFails := range []bool{false, true} {
		b := newStdinBackend()
		if killFails {
			b.KillProcessFn = func(ctx context.Context, ref, pid, signal string) error {
				b.killed <- pid + " " + signal
				return api.Errorf(503, api.CodeUnavailable, "no")
			}
		}
		c := start(t, &b.Backend)
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe() // stdin never ends
		defer pw.Close()
		errc := make(chan error, 1)
		go func() {
			_, err := c.ExecWithStdin(ctx, "w", api.ExecRequest{Cmd: []string{"cat"}}, pr, io.Discard, io.Discard)
			errc <- err
		}()
		pw.Write([]byte("x")) // the stdin upload runs
		cancel()
		if got := waitFor(t, b.killed, "the kill"); got != "p7 KILL" {
			t.Errorf("killed %q, want p7 KILL", got)
		}
		err := waitFor(t, errc, "ExecWithStdin's end")
		var ke *client.KillError
		if !errors.Is(err, context.Canceled) || errors.As(err, &ke) != killFails {
			t.Errorf("kill fails %v: err = %v; want it to wrap context.Canceled, and a *KillError only when the kill failed", killFails, err)
		}
	}
}

// TestExecWithStdinLost: an output stream that ends without an exit
// status is ErrProcessLost.
func TestExecWithStdinLost(t *testing.T) {
	b := newStdinBackend()
	b.ProcessOutputFn = func(ctx context.Context, ref, pid string, offset int64, follow bool, emit func(api.ExecEvent) error) error {
		return nil
	}
	c := start(t, &b.Backend)
	_, err := c.ExecWithStdin(context.Background(), "w", api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader(""), io.Discard, io.Discard)
	if !errors.Is(err, client.ErrProcessLost) || !strings.Contains(err.Error(), "process p7 was lost") {
		t.Errorf("err = %v, want process p7 was lost (ErrProcessLost)", err)
	}
}
