package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

func TestInteractiveStdinEcho(t *testing.T) {
	b := &backendtest.Fake{}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	// More than one message's worth, plus the request's own stdin first.
	in := bytes.Repeat([]byte("0123456789abcdef"), 20000)
	var out bytes.Buffer
	st, err := c.ExecInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte("head:")}, bytes.NewReader(in), &out, nil)
	if err != nil || st.ExitCode != 0 {
		t.Fatalf("ExecInteractive: %+v, %v", st, err)
	}
	// backendtest's default copies the stdin it is given; the request's Stdin
	// is the daemon's to prepend (checked in vmctl/daemon), not the fake's.
	if !bytes.Equal(out.Bytes(), in) {
		t.Fatalf("got %d bytes back, want %d", out.Len(), len(in))
	}
}

func TestInteractiveControls(t *testing.T) {
	b := &backendtest.Fake{}
	ctl := make(chan *backendtest.Control, 1)
	b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
		c := &backendtest.Control{ID: "e3", PID: 9, Tty: req.Tty != nil}
		started(c)
		ctl <- c
		io.Copy(io.Discard, stdin) // until stdin_close
		io.WriteString(stdout, "bye")
		return api.ExitStatus{ExitCode: 3}, nil
	}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	pr, pw := io.Pipe()
	var out bytes.Buffer
	e, err := c.StartInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"bash"}, Tty: &api.TtySize{Rows: 24, Cols: 80}}, pr, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.ExecID() != "e3" || e.Pid() != 9 {
		t.Errorf("started %s %d, want e3 9", e.ExecID(), e.Pid())
	}
	control := testenv.Receive(t, guard, "the control", ctl)
	if err := e.Resize(ctx, api.TtySize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	if err := e.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	if err := e.Resize(ctx, api.TtySize{Rows: 0, Cols: 132}); !api.HasCode(err, api.CodeInvalidArgument) {
		t.Errorf("Resize to 0 rows: %v, want invalid_argument", err)
	}
	pw.Close() // stdin_close follows the controls on the same connection
	st, err := e.Wait()
	if err != nil || st.ExitCode != 3 || out.String() != "bye" {
		t.Fatalf("Wait: %+v, %v, output %q", st, err, out.String())
	}
	if got := strings.Join(control.Calls(), ","); got != "resize 50x132,signal TERM" {
		t.Errorf("controls %q", got)
	}
}

func TestInteractiveResizeWithoutTty(t *testing.T) {
	b := &backendtest.Fake{}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	pr, pw := io.Pipe()
	e, err := c.StartInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"cat"}}, pr, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Refused by the client before anything is sent.
	if err := e.Resize(ctx, api.TtySize{Rows: 24, Cols: 80}); !api.HasCode(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "without a terminal") {
		t.Fatalf("Resize: %v, want invalid_argument without a terminal", err)
	}
	pw.Close()
	if st, err := e.Wait(); err != nil || st.ExitCode != 0 {
		t.Fatalf("Wait: %+v, %v", st, err)
	}
}

func TestInteractiveErrors(t *testing.T) {
	b := &backendtest.Fake{}
	b.GetSandboxFn = func(ctx context.Context, ref string) (api.Sandbox, error) {
		if ref == "nope" {
			return api.Sandbox{}, &api.Error{Status: 404, Code: api.CodeNotFound, Message: `no sandbox "nope"`}
		}
		return backendtest.Sandbox(backendtest.SandboxID), nil
	}
	b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
		switch req.Cmd[0] {
		case "missing": // could not start: a status, no "started"
			return api.ExitStatus{ExitCode: 127, Error: "missing: command not found"}, nil
		case "limit":
			return api.ExitStatus{}, &api.Error{Status: 429, Code: api.CodeExecLimit, Message: "max_execs"}
		}
		started(&backendtest.Control{ID: "e1", PID: 1})
		<-ctx.Done() // until the client goes
		return api.ExitStatus{}, ctx.Err()
	}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()

	// Before the upgrade: an HTTP error.
	if _, err := c.ExecInteractive(ctx, "nope", api.ExecRequest{Cmd: []string{"true"}}, nil, nil, nil); !api.HasCode(err, api.CodeNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
	// A bad request: its "error" message.
	if _, err := c.ExecInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{}}, nil, nil, nil); !api.HasCode(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "cmd is empty") {
		t.Errorf("empty cmd: %v", err)
	}
	if _, err := c.ExecInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"x"}, Tty: &api.TtySize{Rows: 1}}, nil, nil, nil); !api.HasCode(err, api.CodeInvalidArgument) || !strings.Contains(err.Error(), "terminal size") {
		t.Errorf("tty 1x0: %v", err)
	}
	if st, err := c.ExecInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"missing"}}, nil, nil, nil); err != nil || st.ExitCode != 127 {
		t.Errorf("missing: %+v, %v", st, err)
	}
	if _, err := c.ExecInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"limit"}}, nil, nil, nil); !api.HasCode(err, api.CodeExecLimit) {
		t.Errorf("limit: %v", err)
	}
	// An unknown signal name is the daemon's to refuse (the fake takes
	// all); a cancelled ctx ends the session with ctx's error.
	cctx, ccancel := context.WithCancel(ctx)
	e, err := c.StartInteractive(cctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"sleep"}}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ccancel()
	if _, err := e.Wait(); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

// TestInteractiveBackPressure: a client that does not read its output
// holds the command's writes up; nothing buffers more than the
// connection's socket buffers.
func TestInteractiveBackPressure(t *testing.T) {
	b := &backendtest.Fake{}
	var written atomic.Int64
	b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started(&backendtest.Control{ID: "e1", PID: 1})
		chunk := make([]byte, 64<<10)
		for range 1024 { // 64 MiB
			if _, err := stdout.Write(chunk); err != nil {
				return api.ExitStatus{}, err
			}
			written.Add(int64(len(chunk)))
		}
		return api.ExitStatus{}, nil
	}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	release := make(chan struct{})
	var got atomic.Int64
	out := writerFunc(func(p []byte) (int, error) {
		<-release
		got.Add(int64(len(p)))
		return len(p), nil
	})
	e, err := c.StartInteractive(ctx, backendtest.SandboxID, api.ExecRequest{Cmd: []string{"yes"}}, nil, out, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Let the writer run into the stalled client, then check it stopped
	// far short of the 64 MiB.
	var last int64 = -1
	for written.Load() != last {
		last = written.Load()
		time.Sleep(200 * time.Millisecond)
	}
	if last > 16<<20 {
		t.Errorf("the command wrote %d bytes to a client that read none", last)
	}
	close(release)
	if _, err := e.Wait(); err != nil {
		t.Fatal(err)
	}
	if got.Load() != 64<<20 {
		t.Errorf("got %d bytes, want %d", got.Load(), 64<<20)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
