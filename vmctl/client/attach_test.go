package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// TestAttachProcess: the offset travels, "started" says terminal and
// offset, a dropped range reaches OnDropped, stdin and resize reach the
// process, its end is Wait's status; stdin's EOF closes nothing.
func TestAttachProcess(t *testing.T) {
	b := &backendtest.Fake{}
	ctl := &backendtest.Control{ID: "p2", PID: 42, Tty: true}
	var gotOffset *int64
	var stdinEOF atomic.Bool
	b.Terminals.AttachFn = func(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
		gotOffset = at.Offset
		p := backendtest.Process(pid)
		p.Tty = &api.TtySize{Rows: 24, Cols: 80}
		at.Started(ctl, p, 7)
		io.WriteString(at.Stdout, "ab")
		at.Dropped(9, 30)
		in := make([]byte, 3)
		if _, err := io.ReadFull(at.Stdin, in); err != nil {
			return api.ExitStatus{}, err
		}
		go func() {
			if _, err := at.Stdin.Read(make([]byte, 1)); err == io.EOF {
				stdinEOF.Store(true) // a stdin_close came
			}
		}()
		// The client sends the signal after its stdin's EOF; the server
		// handles messages in order.
		for !slices.Contains(ctl.Calls(), "signal TERM") {
			select {
			case <-ctx.Done():
				return api.ExitStatus{}, ctx.Err()
			case <-time.After(time.Millisecond):
			}
		}
		at.Stdout.Write(in)
		return api.ExitStatus{ExitCode: 3}, nil
	}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	var mu sync.Mutex
	var dropped [][2]int64
	var out bytes.Buffer
	offset := int64(7)
	pr, pw := io.Pipe()
	e, err := c.AttachProcess(ctx, backendtest.SandboxID, "p2", client.AttachOptions{Offset: &offset, OnDropped: func(o, n int64) {
		mu.Lock()
		defer mu.Unlock()
		dropped = append(dropped, [2]int64{o, n})
	}}, pr, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if gotOffset == nil || *gotOffset != 7 || e.ExecID() != "p2" || e.Pid() != 42 || !e.Tty() || e.Offset() != 7 {
		t.Fatalf("attached: offset %v, %s %d tty %v from %d", gotOffset, e.ExecID(), e.Pid(), e.Tty(), e.Offset())
	}
	if err := e.Resize(ctx, api.TtySize{Rows: 40, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(pw, "ls\r")
	pw.Close()
	if err := e.Signal(ctx, "TERM"); err != nil {
		t.Fatal(err)
	}
	st, err := e.Wait()
	if err != nil || st.ExitCode != 3 {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if stdinEOF.Load() {
		t.Fatal("the client's stdin EOF ended the process's input: an attach sends no stdin_close")
	}
	if out.String() != "abls\r" {
		t.Fatalf("output %q", out.String())
	}
	mu.Lock()
	defer mu.Unlock()
	if !reflect.DeepEqual(dropped, [][2]int64{{9, 30}}) {
		t.Fatalf("dropped %v", dropped)
	}
	if calls := ctl.Calls(); !reflect.DeepEqual(calls, []string{"resize 40x100", "signal TERM"}) {
		t.Fatalf("controls %q", calls)
	}
}

// TestAttachDetach: Detach leaves the process running (the backend's ctx
// ends without an exit) and Wait says ErrDetached; a missing process is
// the daemon's 404.
func TestAttachDetach(t *testing.T) {
	b := &backendtest.Fake{}
	detached := make(chan struct{})
	b.Terminals.AttachFn = func(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
		at.Started(&backendtest.Control{ID: pid, PID: 1}, backendtest.Process(pid), 0)
		<-ctx.Done()
		close(detached)
		return api.ExitStatus{}, ctx.Err()
	}
	c := start(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	e, err := c.AttachProcess(ctx, backendtest.SandboxID, "p1", client.AttachOptions{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.Tty() {
		t.Error("a process without a terminal attached as one")
	}
	if err := e.Resize(ctx, api.TtySize{Rows: 5, Cols: 5}); err == nil {
		t.Error("Resize of a process without a terminal was sent")
	}
	e.Detach()
	if _, err := e.Wait(); !errors.Is(err, client.ErrDetached) {
		t.Fatalf("Wait after Detach: %v, want ErrDetached", err)
	}
	testenv.Receive(t, guard, "the backend's end", detached)

	b.GetProcessFn = func(context.Context, string, string) (api.Process, error) {
		return api.Process{}, api.Errorf(404, api.CodeNotFound, "process p9: process not found")
	}
	_, err = c.AttachProcess(ctx, backendtest.SandboxID, "p9", client.AttachOptions{}, nil, nil, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Message != "process p9: process not found" {
		t.Fatalf("attach to a missing process: %v, want its 404", err)
	}
}
