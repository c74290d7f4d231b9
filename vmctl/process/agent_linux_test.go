package process_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/process"
)

// dialGuest serves a real guest agent session in-process on one end of a
// Unix socket pair (it runs commands on this host), keeping detached
// processes in procs, and returns a client of it. Closing the client ends
// the session; the test checks that Serve then returned nil.
func dialGuest(t *testing.T, procs *guestagent.Processes) *agent.Client {
	t.Helper()
	host, guest := testenv.SocketPair(t)
	served := make(chan error, 1)
	go func() {
		served <- guestagent.Serve(context.Background(), guest, guestagent.Options{
			Version:   "test",
			SetClock:  func(time.Time) error { return nil },
			Processes: procs,
		})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, host, agent.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	var once sync.Once
	t.Cleanup(func() {
		c.Close()
		once.Do(func() {
			if err := <-served; err != nil {
				t.Errorf("Serve returned %v after the host closed", err)
			}
		})
	})
	return c
}

// exits records OnExit calls.
type exits struct {
	mu    sync.Mutex
	calls map[string][]process.Info
}

func (x *exits) record(in process.Info) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.calls == nil {
		x.calls = map[string][]process.Info{}
	}
	x.calls[in.ID] = append(x.calls[in.ID], in)
}

func (x *exits) get(id string) []process.Info {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.calls[id]
}

func argv(a ...string) agentproto.ExecRequest { return agentproto.ExecRequest{Argv: a} }

func wait(t *testing.T, tb *process.Table, id string) process.Info {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := tb.Wait(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// streams returns id's whole output per stream from offset, checking that
// the chunks' offsets are contiguous.
func streams(t *testing.T, tb *process.Table, id string, offset int64) (map[string]string, process.Info) {
	t.Helper()
	out := map[string]string{}
	next := offset
	info, err := tb.Output(context.Background(), id, offset, false, func(c process.Chunk) error {
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
		t.Errorf("read up to %d, info says %d bytes", next, info.OutputBytes)
	}
	return out, info
}

// until follows id's output from offset until the combined output
// contains want.
func until(t *testing.T, tb *process.Table, id string, offset int64, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errFound := errors.New("found")
	var all []byte
	_, err := tb.Output(ctx, id, offset, true, func(c process.Chunk) error {
		all = append(all, c.Data...)
		if bytes.Contains(all, []byte(want)) {
			return errFound
		}
		return nil
	})
	if err != errFound {
		t.Fatalf("output %q ended without %q: %v", all, want, err)
	}
}

func TestRealAgent(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	c := dialGuest(t, procs)
	var ex exits
	tb := process.NewTable(c, process.Options{OnExit: ex.record})
	ctx := context.Background()

	// Stdin given later, then closed.
	info, err := tb.Start(ctx, "read", argv("/bin/sh", "-c", "read x; echo got $x; echo done >&2"), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.Pid <= 0 || !info.StdinOpen || info.State != process.StateRunning {
		t.Fatalf("start info %+v", info)
	}
	if _, err := tb.Start(ctx, "read", argv("true"), nil, false); !errors.Is(err, process.ErrExists) {
		t.Fatalf("start under a used id: %v", err)
	}
	if n, err := tb.WriteStdin(ctx, "read", strings.NewReader("hi\n"), true); n != 3 || err != nil {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	info = wait(t, tb, "read")
	if info.State != process.StateExited || info.Exit.Code != 0 || info.OutputBytes != 12 || info.StdinOpen {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}
	if got, _ := streams(t, tb, "read", 0); got["stdout"] != "got hi\n" || got["stderr"] != "done\n" {
		t.Fatalf("output %q", got)
	}
	if _, err := tb.WriteStdin(ctx, "read", strings.NewReader("x"), false); !errors.Is(err, process.ErrExited) {
		t.Fatalf("WriteStdin after the end: %v", err)
	}

	// Initial stdin bytes without stdinOpen; stdin closed from the start.
	if _, err := tb.Start(ctx, "cat", argv("cat"), []byte("abc"), false); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "cat"); info.State != process.StateExited || info.Exit.Code != 0 {
		t.Fatalf("info %+v", info)
	}
	if got, _ := streams(t, tb, "cat", 0); got["stdout"] != "abc" {
		t.Fatalf("output %q", got)
	}
	if _, err := tb.Start(ctx, "nostdin", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.WriteStdin(ctx, "nostdin", strings.NewReader("x"), false); !errors.Is(err, process.ErrStdinClosed) {
		t.Fatalf("WriteStdin without stdin_open: %v", err)
	}
	if err := tb.Signal(ctx, "nostdin", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	// Signal.
	if _, err := tb.Start(ctx, "sleep", argv("/bin/sh", "-c", "echo ready; exec sleep 1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	until(t, tb, "sleep", 0, "ready\n")
	if err := tb.Signal(ctx, "sleep", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "sleep"); info.State != process.StateExited || info.Exit.Signal != 15 || info.Exit.ShellCode() != 143 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}
	if err := tb.Signal(ctx, "sleep", syscall.SIGTERM); !errors.Is(err, process.ErrExited) {
		t.Fatalf("Signal after exit: %v", err)
	}

	// Not found: exited with the start failure, at once.
	if info, err := tb.Start(ctx, "nf", argv("no-such-command-here"), nil, false); err != nil || info.State != process.StateExited || info.Exit.ShellCode() != 127 {
		t.Fatalf("start of a missing command: %+v, %v", info, err)
	}

	// Output beyond the ring is dropped, with the numbers.
	if _, err := tb.Start(ctx, "big", argv("head", "-c", "1049576", "/dev/zero"), nil, false); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "big"); info.OutputBytes != 1049576 || info.OutputDropped != 1000 {
		t.Fatalf("big %+v", info)
	}
	var de *process.DroppedError
	if _, err := tb.Output(ctx, "big", 10, false, func(process.Chunk) error { return nil }); !errors.As(err, &de) || !errors.Is(err, process.ErrDropped) || de.Offset != 10 || de.Dropped != 1000 || de.Kept != agentproto.ProcRingBytes {
		t.Fatalf("output from 10: %v (%+v)", err, de)
	}
	if got, _ := streams(t, tb, "big", 1000); len(got["stdout"]) != agentproto.ProcRingBytes {
		t.Fatalf("kept output %d bytes", len(got["stdout"]))
	}
	if _, err := tb.Get(ctx, "nosuch"); !errors.Is(err, process.ErrNotFound) {
		t.Fatalf("Get of an unknown id: %v", err)
	}
	if got := tb.List(ctx); len(got) != 6 {
		t.Fatalf("List: %d processes", len(got))
	}
	for _, id := range []string{"read", "cat", "nostdin", "sleep", "nf", "big"} {
		wait(t, tb, id)
		if got := ex.get(id); len(got) != 1 {
			t.Errorf("OnExit(%s) calls %+v", id, got)
		}
	}
}

// TestRestart: a host that goes away (Detach, session closed) leaves its
// processes running in the guest; a new table on a new session adopts
// them: the one that ended meanwhile gets its OnExit (once, unless it was
// recorded), the running one is followed from the offset the first host
// saw, fed stdin and killed.
func TestRestart(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	c1 := dialGuest(t, procs)
	var ex1 exits
	tb1 := process.NewTable(c1, process.Options{OnExit: ex1.record})
	if _, err := tb1.Start(ctx, "e1", argv("sh", "-c", "echo a; read x; echo got:$x; exec sleep 1000"), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tb1.Start(ctx, "e2", argv("sh", "-c", "read x; exit 7"), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tb1.Start(ctx, "e3", argv("true"), nil, false); err != nil {
		t.Fatal(err)
	}
	wait(t, tb1, "e3") // recorded by the first host
	until(t, tb1, "e1", 0, "a\n")
	tb1.Detach()
	c1.Close()
	if got := ex1.get("e1"); len(got) != 0 {
		t.Fatalf("Detach called OnExit: %+v", got)
	}

	// e2 ends while no host watches.
	c2 := dialGuest(t, procs)
	if n, err := c2.WriteProcessStdin(ctx, "e2", nil, true); n != 0 || err != nil {
		t.Fatalf("close e2's stdin: %d, %v", n, err)
	}
	if _, err := c2.WaitProcess(ctx, "e2"); err != nil {
		t.Fatal(err)
	}

	var ex2 exits
	tb2 := process.NewTable(c2, process.Options{OnExit: ex2.record})
	var adopted []string
	if err := tb2.Adopt(ctx, func(in process.Info) bool {
		adopted = append(adopted, in.ID+"/"+in.State)
		return in.ID == "e3"
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"e1/running", "e2/exited", "e3/exited"}; strings.Join(adopted, ",") != strings.Join(want, ",") {
		t.Fatalf("adopt calls %v, want %v", adopted, want)
	}
	if err := tb2.Adopt(ctx, func(in process.Info) bool { t.Errorf("adopted %s twice", in.ID); return false }); err != nil {
		t.Fatal(err)
	}
	list := tb2.List(ctx)
	if len(list) != 3 || list[0].ID != "e1" || list[0].State != process.StateRunning || list[0].OutputBytes != 2 || !list[0].StdinOpen ||
		list[1].ID != "e2" || list[1].State != process.StateExited || list[1].Exit.Code != 7 ||
		list[2].ID != "e3" || list[2].State != process.StateExited {
		t.Fatalf("adopted %+v", list)
	}
	if got := ex2.get("e2"); len(got) != 1 || got[0].Exit.Code != 7 {
		t.Fatalf("OnExit(e2) after adoption: %+v", got)
	}
	if got := ex2.get("e3"); len(got) != 0 {
		t.Fatalf("OnExit(e3) again after adoption: %+v", got)
	}
	if n, err := tb2.WriteStdin(ctx, "e1", strings.NewReader("x\n"), false); n != 2 || err != nil {
		t.Fatalf("WriteStdin after adoption = %d, %v", n, err)
	}
	until(t, tb2, "e1", 2, "got:x\n")
	if err := tb2.Signal(ctx, "e1", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	info := wait(t, tb2, "e1")
	if info.State != process.StateExited || info.Exit.Signal != 9 || info.OutputBytes != 8 {
		t.Fatalf("e1 after kill %+v", info)
	}
	if got, _ := streams(t, tb2, "e1", 0); got["stdout"] != "a\ngot:x\n" {
		t.Fatalf("e1 output %q", got)
	}
	if got := ex2.get("e1"); len(got) != 1 {
		t.Fatalf("OnExit(e1) calls %+v", got)
	}

	// CloseAll: running ones become lost, are killed, and OnExit runs.
	if _, err := tb2.Start(ctx, "e4", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	tb2.CloseAll("sandbox stopped")
	if info, _ := tb2.Get(ctx, "e4"); info.State != process.StateLost || info.Error != "sandbox stopped" {
		t.Fatalf("e4 after CloseAll %+v", info)
	}
	if gi, err := c2.WaitProcess(ctx, "e4"); err != nil || gi.Exit == nil || gi.Exit.Signal != 9 {
		t.Fatalf("e4 in the guest after CloseAll: %+v, %v", gi, err)
	}
	if _, err := tb2.Start(ctx, "e5", argv("true"), nil, false); !errors.Is(err, process.ErrClosed) {
		t.Fatalf("Start after CloseAll: %v", err)
	}
	if got := ex2.get("e4"); len(got) != 1 || got[0].State != process.StateLost {
		t.Fatalf("OnExit(e4) calls %+v", got)
	}
}

// TestLostWhenGuestGoes: the session's end without Detach (the guest
// died) makes a running process lost, with OnExit once.
func TestLostWhenGuestGoes(t *testing.T) {
	c := dialGuest(t, nil)
	var ex exits
	tb := process.NewTable(c, process.Options{OnExit: ex.record})
	if _, err := tb.Start(context.Background(), "lost", argv("sleep", "1000"), nil, true); err != nil {
		t.Fatal(err)
	}
	c.Close()
	info := wait(t, tb, "lost")
	if info.State != process.StateLost || info.Exit != nil || !strings.Contains(info.Error, "disconnected") {
		t.Fatalf("info %+v", info)
	}
	if got := ex.get("lost"); len(got) != 1 {
		t.Fatalf("OnExit calls %+v", got)
	}
}
