package guestagent_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// session dials a guest agent session serving procs and returns its
// client and a func that ends the session and waits until Serve returned
// nil.
func session(t *testing.T, procs *guestagent.Processes) (*agent.Client, func()) {
	t.Helper()
	ta := startGuest(t, guestagent.Options{Processes: procs})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := agent.Dial(ctx, ta.host, agent.Options{})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	ended := false
	end := func() {
		if ended {
			return
		}
		ended = true
		c.Close()
		if err := <-ta.served; err != nil {
			t.Errorf("Serve returned %v after the host closed", err)
		}
	}
	t.Cleanup(end)
	return c, end
}

// chunk is a ProcChunk with its Data copied.
type chunk struct {
	stream byte
	off    int64
	data   string
}

// readOutput reads id's output from offset (following until the combined
// output holds want, when want is set), checking that offsets are
// contiguous.
func readOutput(t *testing.T, c *agent.Client, id string, offset int64, want string) ([]chunk, agentproto.ProcOutputEnd, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []chunk
	var all strings.Builder
	next := offset
	errFound := errors.New("found")
	end, err := c.ProcessOutput(ctx, id, offset, want != "", func(ch agentproto.ProcChunk) error {
		if ch.Offset != next {
			t.Errorf("chunk at offset %d, want %d", ch.Offset, next)
		}
		next = ch.Offset + int64(len(ch.Data))
		got = append(got, chunk{ch.Stream, ch.Offset, string(ch.Data)})
		all.Write(ch.Data)
		if want != "" && strings.Contains(all.String(), want) {
			return errFound
		}
		return nil
	})
	if err == errFound {
		err = nil
	}
	return got, end, err
}

func joined(cs []chunk, stream byte) string {
	var b strings.Builder
	for _, c := range cs {
		if c.stream == stream {
			b.WriteString(c.data)
		}
	}
	return b.String()
}

func code(err error) agentproto.ErrorCode {
	var pe *agentproto.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestProcSurvivesSession: a detached process keeps running when its host
// session ends; the next session lists it, reads its output from an
// offset, writes its stdin, signals it, waits for it and forgets it.
func TestProcSurvivesSession(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()

	c1, end1 := session(t, procs)
	info, err := c1.SpawnProcess(ctx, "e000001", argv("sh", "-c", "echo one; echo err >&2; read x; echo got $x; exec sleep 1000"), nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "e000001" || info.Pid <= 0 || info.State != agentproto.ProcRunning || !info.StdinOpen || len(info.Argv) != 3 {
		t.Fatalf("spawned %+v", info)
	}
	if _, err := c1.SpawnProcess(ctx, "e000001", argv("true"), nil, false); code(err) != agentproto.CodeExists {
		t.Fatalf("spawn under a kept id: %v, want CodeExists", err)
	}
	if _, _, err := readOutput(t, c1, "e000001", 0, "err\n"); err != nil {
		t.Fatal(err)
	}
	// An attached exec of the same session dies with the session.
	p, err := c1.Start(ctx, argv("sleep", "1000"), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	end1()
	waitGone(t, p.Pid())

	c2, _ := session(t, procs)
	list, err := c2.ListProcesses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "e000001" || list[0].Pid != info.Pid || list[0].State != agentproto.ProcRunning || list[0].OutputBytes != 8 || !list[0].StdinOpen {
		t.Fatalf("list in the next session: %+v", list)
	}
	if n, err := c2.WriteProcessStdin(ctx, "e000001", strings.NewReader("hi\n"), true); n != 3 || err != nil {
		t.Fatalf("WriteProcessStdin = %d, %v", n, err)
	}
	got, _, err := readOutput(t, c2, "e000001", 8, "got hi\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].off != 8 || joined(got, agentproto.ProcStdout) != "got hi\n" {
		t.Fatalf("output from offset 8: %+v", got)
	}
	if _, err := c2.WriteProcessStdin(ctx, "e000001", strings.NewReader("more"), false); code(err) != agentproto.CodeStdinClosed {
		t.Fatalf("stdin after close: %v, want CodeStdinClosed", err)
	}
	if err := c2.ForgetProcess(ctx, "e000001"); code(err) != agentproto.CodeProcRunning {
		t.Fatalf("forget while running: %v, want CodeProcRunning", err)
	}
	if err := c2.SignalProcess(ctx, "e000001", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	final, err := c2.WaitProcess(ctx, "e000001")
	if err != nil {
		t.Fatal(err)
	}
	if final.State != agentproto.ProcExited || final.Exit == nil || final.Exit.Signal != 15 || final.OutputBytes != 15 || final.EndedNs == 0 || final.StdinOpen {
		t.Fatalf("final %+v exit %+v", final, final.Exit)
	}
	waitGone(t, info.Pid)
	// The whole output, both streams, after the end.
	all, end, err := readOutput(t, c2, "e000001", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if joined(all, agentproto.ProcStdout) != "one\ngot hi\n" || joined(all, agentproto.ProcStderr) != "err\n" || end.Dropped || end.Next != 15 || end.Info.State != agentproto.ProcExited {
		t.Fatalf("whole output %+v, end %+v", all, end)
	}
	if err := c2.SignalProcess(ctx, "e000001", syscall.SIGTERM); code(err) != agentproto.CodeProcExited {
		t.Fatalf("signal after the end: %v, want CodeProcExited", err)
	}
	if _, err := c2.WriteProcessStdin(ctx, "e000001", strings.NewReader("x"), false); code(err) != agentproto.CodeProcExited {
		t.Fatalf("stdin after the end: %v, want CodeProcExited", err)
	}
	if err := c2.ForgetProcess(ctx, "e000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.GetProcess(ctx, "e000001"); code(err) != agentproto.CodeNotFound {
		t.Fatalf("get after forget: %v, want CodeNotFound", err)
	}
}

// TestProcEndsWhileNoSession: a process that ends between sessions keeps
// its status and output for the next one.
func TestProcEndsWhileNoSession(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	c1, end1 := session(t, procs)
	if _, err := c1.SpawnProcess(ctx, "p1", argv("sh", "-c", "read x; echo bye; exit 3"), nil, true); err != nil {
		t.Fatal(err)
	}
	if n, err := c1.WriteProcessStdin(ctx, "p1", nil, true); n != 0 || err != nil {
		t.Fatalf("close stdin: %d, %v", n, err)
	}
	end1()
	c2, _ := session(t, procs)
	final, err := c2.WaitProcess(ctx, "p1")
	if err != nil || final.Exit == nil || final.Exit.Code != 3 || final.OutputBytes != 4 {
		t.Fatalf("wait: %+v, %v", final, err)
	}
	if all, _, err := readOutput(t, c2, "p1", 0, ""); err != nil || joined(all, agentproto.ProcStdout) != "bye\n" {
		t.Fatalf("output %+v, %v", all, err)
	}
}

// TestProcOutputDropped: output beyond the ring is dropped and said so.
func TestProcOutputDropped(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	c, _ := session(t, procs)
	const total = agentproto.ProcRingBytes + 5000
	if _, err := c.SpawnProcess(ctx, "big", argv("head", "-c", "1053576", "/dev/zero"), nil, false); err != nil {
		t.Fatal(err)
	}
	final, err := c.WaitProcess(ctx, "big")
	if err != nil || final.Exit == nil || final.Exit.Code != 0 || final.OutputBytes != total || final.OutputDropped != 5000 {
		t.Fatalf("final %+v, %v", final, err)
	}
	got, end, err := readOutput(t, c, "big", 4999, "")
	if err != nil || len(got) != 0 || !end.Dropped || end.Next != 4999 || end.Info.OutputDropped != 5000 {
		t.Fatalf("output from 4999: %d chunks, end %+v, %v; want none, dropped 5000", len(got), end, err)
	}
	got, end, err = readOutput(t, c, "big", 5000, "")
	if err != nil || end.Dropped || end.Next != total {
		t.Fatalf("output from 5000: end %+v, %v", end, err)
	}
	if s := joined(got, agentproto.ProcStdout); len(s) != agentproto.ProcRingBytes || !bytes.Equal([]byte(s), make([]byte, agentproto.ProcRingBytes)) {
		t.Fatalf("kept output: %d bytes", len(s))
	}
}

// TestProcStartFailureAndSessionTable: a command that cannot start is an
// exited process; without Options.Processes the table is the session's and
// its commands die with it.
func TestProcStartFailureAndSessionTable(t *testing.T) {
	c, end := session(t, nil)
	ctx := context.Background()
	info, err := c.SpawnProcess(ctx, "nf", argv("no-such-command-here"), nil, false)
	if err != nil || info.State != agentproto.ProcExited || info.Exit == nil || info.Exit.ShellCode() != 127 {
		t.Fatalf("spawn of a missing command: %+v, %v", info, err)
	}
	info, err = c.SpawnProcess(ctx, "sl", argv("sleep", "1000"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	end()
	waitGone(t, info.Pid)
}

// TestProcOnTerminal: a detached process with a terminal takes input
// through OpProcStdin (echoed by the line discipline), is resized by
// OpProcResize (SIGWINCH, the new size in its ProcInfo) in a later
// session, and a process without a terminal refuses a resize.
func TestProcOnTerminal(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()

	c1, end1 := session(t, procs)
	req := argv("sh", "-c", `trap 'echo winch' WINCH; stty size; until read x; do :; done; echo "got $x"; stty size; exit 3`)
	req.Tty = &agentproto.TtySize{Rows: 24, Cols: 80}
	info, err := c1.SpawnProcess(ctx, "t1", req, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if !info.StdinOpen || info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 24, Cols: 80}) {
		t.Fatalf("spawned on a terminal: %+v (tty %v): want stdin open and tty 24x80", info, info.Tty)
	}
	if _, _, err := readOutput(t, c1, "t1", 0, "24 80\r\n"); err != nil {
		t.Fatal(err)
	}
	end1()

	c2, _ := session(t, procs)
	info, err = c2.ResizeProcess(ctx, "t1", agentproto.TtySize{Rows: 50, Cols: 132})
	if err != nil {
		t.Fatal(err)
	}
	if info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 50, Cols: 132}) {
		t.Fatalf("after resize: tty %v, want 50x132", info.Tty)
	}
	if _, _, err := readOutput(t, c2, "t1", 0, "winch\r\n"); err != nil {
		t.Fatal(err)
	}
	if n, err := c2.WriteProcessStdin(ctx, "t1", strings.NewReader("hi\n"), false); n != 3 || err != nil {
		t.Fatalf("WriteProcessStdin = %d, %v", n, err)
	}
	final, err := c2.WaitProcess(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if final.Exit == nil || final.Exit.Code != 3 {
		t.Fatalf("final %+v exit %+v, want code 3", final, final.Exit)
	}
	all, _, err := readOutput(t, c2, "t1", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	// The line discipline echoes the input (ONLCR: \r\n) before the
	// shell reads it; all output is stdout.
	if out := joined(all, agentproto.ProcStdout); out != "24 80\r\nwinch\r\nhi\r\ngot hi\r\n50 132\r\n" {
		t.Fatalf("output %q", out)
	}
	if _, err := c2.ResizeProcess(ctx, "t1", agentproto.TtySize{Rows: 10, Cols: 10}); code(err) != agentproto.CodeProcExited {
		t.Fatalf("resize after the end: %v, want CodeProcExited", err)
	}

	if _, err := c2.SpawnProcess(ctx, "p1", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	_, err = c2.ResizeProcess(ctx, "p1", agentproto.TtySize{Rows: 10, Cols: 10})
	if code(err) != agentproto.CodeNoTty || !strings.Contains(err.Error(), "only a process started with a terminal (tty) has a size to change") {
		t.Fatalf("resize without a terminal: %v, want CodeNoTty saying why", err)
	}
	if info, err := c2.GetProcess(ctx, "p1"); err != nil || info.Tty != nil {
		t.Fatalf("a process without a terminal: %+v, %v", info, err)
	}
	if _, err := c2.ResizeProcess(ctx, "nope", agentproto.TtySize{Rows: 10, Cols: 10}); code(err) != agentproto.CodeNotFound {
		t.Fatalf("resize of an unknown process: %v, want CodeNotFound", err)
	}
}
