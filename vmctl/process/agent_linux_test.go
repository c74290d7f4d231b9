package process_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/process"
)

// dialGuest serves a real guest agent in-process on one end of a Unix
// socket pair (it runs commands on this host) and returns a client of it.
// The test ends by checking that Serve returned nil after the host closed.
func dialGuest(t *testing.T) *agent.Client {
	t.Helper()
	host, guest := testenv.SocketPair(t)
	served := make(chan error, 1)
	go func() {
		served <- guestagent.Serve(context.Background(), guest, guestagent.Options{
			Version:  "test",
			SetClock: func(time.Time) error { return nil },
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, host, agent.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve returned %v after the host closed", err)
		}
	})
	return c
}

// streams returns id's whole output per stream, checking that the chunks'
// offsets are contiguous from 0.
func streams(t *testing.T, tb *process.Table, id string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var next int64
	info, err := tb.Output(context.Background(), id, 0, false, func(c process.Chunk) error {
		if c.Offset != next {
			t.Errorf("chunk at %d, want %d", c.Offset, next)
		}
		next += int64(len(c.Data))
		out[c.Stream] += string(c.Data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if next != info.OutputBytes {
		t.Errorf("read %d bytes, info says %d", next, info.OutputBytes)
	}
	return out
}

func TestRealAgent(t *testing.T) {
	c := dialGuest(t)
	var ex exits
	tb := process.NewTable(process.Options{OnExit: ex.record})
	life, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := process.AgentStart(c)

	// Stdin given later, then closed.
	info, err := tb.Start(life, "read", argv("/bin/sh", "-c", "read x; echo got $x; echo done >&2"), nil, true, start)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid <= 0 || !info.StdinOpen {
		t.Fatalf("start info %+v", info)
	}
	if n, err := tb.WriteStdin(context.Background(), "read", strings.NewReader("hi\n"), true); n != 3 || err != nil {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	info = wait(t, tb, "read")
	if info.State != process.StateExited || info.Exit.Code != 0 || info.OutputBytes != 12 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}
	if got := streams(t, tb, "read"); got["stdout"] != "got hi\n" || got["stderr"] != "done\n" {
		t.Fatalf("output %q", got)
	}

	// Initial stdin bytes without stdinOpen.
	if _, err := tb.Start(life, "cat", argv("cat"), []byte("abc"), false, start); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "cat"); info.State != process.StateExited || info.Exit.Code != 0 {
		t.Fatalf("info %+v", info)
	}
	if got := streams(t, tb, "cat"); got["stdout"] != "abc" {
		t.Fatalf("output %q", got)
	}

	// Signal.
	if _, err := tb.Start(life, "sleep", argv("/bin/sh", "-c", "echo ready; exec sleep 1000"), nil, false, start); err != nil {
		t.Fatal(err)
	}
	until(t, tb, "sleep", "ready\n")
	if err := tb.Signal(context.Background(), "sleep", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "sleep"); info.State != process.StateExited || info.Exit.Signal != 15 || info.Exit.ShellCode() != 143 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}
	if err := tb.Signal(context.Background(), "sleep", syscall.SIGTERM); !errors.Is(err, process.ErrExited) {
		t.Fatalf("Signal after exit: %v", err)
	}

	// Not found: exited with the start failure.
	if _, err := tb.Start(life, "nf", argv("no-such-command-here"), nil, false, start); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "nf"); info.State != process.StateExited || info.Exit.ShellCode() != 127 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}

	// The lifetime context's end kills.
	short, stop := context.WithCancel(context.Background())
	if _, err := tb.Start(short, "ctx", argv("sleep", "1000"), nil, false, start); err != nil {
		t.Fatal(err)
	}
	stop()
	if info := wait(t, tb, "ctx"); info.State != process.StateExited || info.Exit.Signal != 9 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}

	// The agent connection's end makes a running process lost.
	if _, err := tb.Start(life, "lost", argv("sleep", "1000"), nil, true, start); err != nil {
		t.Fatal(err)
	}
	c.Close()
	info = wait(t, tb, "lost")
	if info.State != process.StateLost || info.Exit != nil || !strings.Contains(info.Error, "disconnected") {
		t.Fatalf("info %+v", info)
	}
	tb.WaitWaiters()
	for _, id := range []string{"read", "cat", "sleep", "nf", "ctx", "lost"} {
		if got := ex.get(id); len(got) != 1 {
			t.Errorf("OnExit(%s) calls %+v", id, got)
		}
	}
}
