package procs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent/procs"
)

func ch(stream string, off int64, data string) procs.Chunk {
	return procs.Chunk{Stream: stream, Offset: off, Data: []byte(data)}
}

func eqChunks(t *testing.T, what string, got []procs.Chunk, want ...procs.Chunk) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s:\n got %s\nwant %s", what, fmtChunks(got), fmtChunks(want))
	}
}

func fmtChunks(cs []procs.Chunk) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "[%s@%d %q]", c.Stream, c.Offset, c.Data)
	}
	return b.String()
}

func TestStreamsMatchAPI(t *testing.T) {
	// The values of api.EventStdout and EventStderr (not imported:
	// vmctl/api is above this package). The states are agentproto's
	// (its TestProcInfoJSON).
	if procs.StreamStdout != "stdout" || procs.StreamStderr != "stderr" {
		t.Fatal("stream names differ from the api.Event* strings")
	}
}

func TestOffsetsAcrossStreams(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	ctx := context.Background()
	info, err := tb.Start(ctx, "p1", argv("x", "-y"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "ab")
		f.out("stderr", "cde")
		f.out("stdout", "f")
		f.out("stdout", "gh") // merged with "f"
		f.out("stderr", "i")
		return exit(3)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "p1" || info.Pid == 0 || !reflect.DeepEqual(info.Argv, []string{"x", "-y"}) || info.StdinOpen || info.StartedNs == 0 {
		t.Fatalf("start info %+v", info)
	}
	info = wait(t, tb, "p1")
	if info.State != agentproto.ProcExited || info.Exit == nil || info.Exit.Code != 3 || info.OutputBytes != 9 || info.OutputDropped != 0 || info.EndedNs == 0 || info.Error != "" {
		t.Fatalf("end info %+v", info)
	}

	got, oi, err := collect(t, tb, ctx, "p1", 0, false)
	if err != nil {
		t.Fatal(err)
	}
	eqChunks(t, "from 0", got, ch("stdout", 0, "ab"), ch("stderr", 2, "cde"), ch("stdout", 5, "fgh"), ch("stderr", 8, "i"))
	if !reflect.DeepEqual(oi, info) {
		t.Fatalf("Output info %+v, want %+v", oi, info)
	}
	got, _, _ = collect(t, tb, ctx, "p1", 3, false)
	eqChunks(t, "from 3", got, ch("stderr", 3, "de"), ch("stdout", 5, "fgh"), ch("stderr", 8, "i"))
	got, _, _ = collect(t, tb, ctx, "p1", 5, true)
	eqChunks(t, "from 5", got, ch("stdout", 5, "fgh"), ch("stderr", 8, "i"))
	got, _, _ = collect(t, tb, ctx, "p1", 7, false)
	eqChunks(t, "from 7", got, ch("stdout", 7, "h"), ch("stderr", 8, "i"))
	got, _, err = collect(t, tb, ctx, "p1", 9, true)
	eqChunks(t, "from the end", got)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _ = collect(t, tb, ctx, "p1", -4, false)
	eqChunks(t, "negative offset", got, ch("stdout", 0, "ab"), ch("stderr", 2, "cde"), ch("stdout", 5, "fgh"), ch("stderr", 8, "i"))

	if _, err := tb.Get("nope"); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("Get unknown: %v", err)
	}
	if _, _, err := collect(t, tb, ctx, "nope", 0, false); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("Output unknown: %v", err)
	}
}

func TestLargeWritesSplitIntoChunks(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	big := bytes.Repeat([]byte("0123456789abcdef"), (agentproto.ChunkSize+32)/16)
	_, err := tb.Start(context.Background(), "big", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", string(big))
		return exit(0)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "big")
	got, _, _ := collect(t, tb, context.Background(), "big", 0, false)
	eqChunks(t, "split", got,
		procs.Chunk{Stream: "stdout", Offset: 0, Data: big[:agentproto.ChunkSize]},
		procs.Chunk{Stream: "stdout", Offset: agentproto.ChunkSize, Data: big[agentproto.ChunkSize:]})
}

// TestFollowLockstep lets the command write only after the follower got the
// previous chunk, so every chunk reaches the follower through a wakeup.
func TestFollowLockstep(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	step := make(chan struct{})
	parts := []procs.Chunk{ch("stdout", 0, "one\n"), ch("stderr", 4, "two\n"), ch("stdout", 8, "three\n")}
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		for _, p := range parts {
			<-step
			f.out(p.Stream, string(p.Data))
		}
		<-step
		return exit(0)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	step <- struct{}{}
	var got []procs.Chunk
	info, err := tb.Output(context.Background(), "p", 0, true, func(c procs.Chunk) error {
		got = append(got, procs.Chunk{Stream: c.Stream, Offset: c.Offset, Data: bytes.Clone(c.Data)})
		step <- struct{}{} // the next write, or the exit
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	eqChunks(t, "followed", got, parts...)
	if info.State != agentproto.ProcExited || info.Exit.Code != 0 || info.OutputBytes != 14 {
		t.Fatalf("final info %+v", info)
	}
}

func TestFollowEndsOnCancel(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "hi")
		return f.untilSignal()
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var got []procs.Chunk
	info, err := tb.Output(ctx, "p", 0, true, func(c procs.Chunk) error {
		got = append(got, c)
		cancel() // the follower now waits for more, until it sees ctx end
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Output = %v, want context.Canceled", err)
	}
	if len(got) != 1 || info.State != agentproto.ProcRunning || info.OutputBytes != 2 {
		t.Fatalf("got %s, info %+v", fmtChunks(got), info)
	}
	// The request's end did not touch the process.
	if in, _ := tb.Get("p"); in.State != agentproto.ProcRunning {
		t.Fatalf("state after cancelled follow: %+v", in)
	}
	if err := tb.Signal(context.Background(), "p", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "p")
}

func TestBufferDropsOldest(t *testing.T) {
	tb := procs.NewTable(procs.Options{BufferBytes: 10})
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "0123456789")
		f.out("stderr", "abcde")
		return exit(0)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	info := wait(t, tb, "p")
	if info.OutputBytes != 15 || info.OutputDropped != 5 {
		t.Fatalf("info %+v", info)
	}
	for _, off := range []int64{0, 4} {
		got, oi, err := collect(t, tb, context.Background(), "p", off, false)
		var de *agentproto.ProcDroppedError
		if !errors.Is(err, agentproto.ErrProcDropped) || !errors.As(err, &de) || len(got) != 0 {
			t.Fatalf("offset %d: %v, %s", off, err, fmtChunks(got))
		}
		if *de != (agentproto.ProcDroppedError{ID: "p", Offset: off, Dropped: 5, Kept: 10}) {
			t.Fatalf("offset %d: %+v", off, *de)
		}
		if !strings.Contains(err.Error(), "resume from offset 5") || oi.OutputDropped != 5 {
			t.Fatalf("offset %d: message %q, info %+v", off, err, oi)
		}
	}
	got, _, err := collect(t, tb, context.Background(), "p", 5, false)
	if err != nil {
		t.Fatal(err)
	}
	eqChunks(t, "from 5", got, ch("stdout", 5, "56789"), ch("stderr", 10, "abcde"))
	got, _, _ = collect(t, tb, context.Background(), "p", 8, true)
	eqChunks(t, "from 8", got, ch("stdout", 8, "89"), ch("stderr", 10, "abcde"))

	// One write larger than the buffer keeps its tail.
	_, err = tb.Start(context.Background(), "q", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stderr", "abcdefghijklmnopqrstuvwxy")
		return exit(0)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "q"); info.OutputBytes != 25 || info.OutputDropped != 15 {
		t.Fatalf("info %+v", info)
	}
	got, _, _ = collect(t, tb, context.Background(), "q", 15, false)
	eqChunks(t, "tail", got, ch("stderr", 15, "pqrstuvwxy"))
}

// TestFollowerFallsBehind: output overflows the buffer while a follower's
// emit is blocked; its next round ends with agentproto.ErrProcDropped.
func TestFollowerFallsBehind(t *testing.T) {
	tb := procs.NewTable(procs.Options{BufferBytes: 4})
	more, written := make(chan struct{}), make(chan struct{})
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "aaaa")
		<-more
		f.out("stdout", "bbbbbbbb")
		close(written)
		return f.untilSignal()
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var got []procs.Chunk
	_, err = tb.Output(context.Background(), "p", 0, true, func(c procs.Chunk) error {
		got = append(got, procs.Chunk{Stream: c.Stream, Offset: c.Offset, Data: bytes.Clone(c.Data)})
		close(more)
		<-written
		return nil
	})
	var de *agentproto.ProcDroppedError
	if !errors.As(err, &de) || de.Offset != 4 || de.Dropped != 8 {
		t.Fatalf("Output = %v", err)
	}
	eqChunks(t, "before falling behind", got, ch("stdout", 0, "aaaa"))
	got, _, err = collect(t, tb, context.Background(), "p", 8, false)
	if err != nil {
		t.Fatal(err)
	}
	eqChunks(t, "after", got, ch("stdout", 8, "bbbb"))
	if err := tb.Signal(context.Background(), "p", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "p")
}

// echo copies stdin to stdout until EOF, then exits 0.
func echo(f *fake) (agentproto.ExitStatus, error) {
	if _, err := io.Copy(f.stdout, f.stdin); err != nil {
		return agentproto.ExitStatus{Code: 1}, nil
	}
	return exit(0)
}

func TestStdinRoundTrip(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	ctx := context.Background()
	info, err := tb.Start(ctx, "e", argv("cat"), []byte("hello "), true, starter(echo, nil))
	if err != nil {
		t.Fatal(err)
	}
	if !info.StdinOpen || info.State != agentproto.ProcRunning {
		t.Fatalf("start info %+v", info)
	}
	if n, err := tb.WriteStdin(ctx, "e", strings.NewReader("world\n"), false); n != 6 || err != nil {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	until(t, tb, "e", "hello world\n")
	if in, _ := tb.Get("e"); !in.StdinOpen || in.State != agentproto.ProcRunning {
		t.Fatalf("info %+v", in)
	}
	if n, err := tb.WriteStdin(ctx, "e", strings.NewReader("bye"), true); n != 3 || err != nil {
		t.Fatalf("WriteStdin close = %d, %v", n, err)
	}
	info = wait(t, tb, "e")
	if info.State != agentproto.ProcExited || info.Exit.Code != 0 || info.StdinOpen {
		t.Fatalf("end info %+v", info)
	}
	var all []byte
	if _, err := tb.Output(ctx, "e", 0, false, func(c procs.Chunk) error { all = append(all, c.Data...); return nil }); err != nil {
		t.Fatal(err)
	}
	if string(all) != "hello world\nbye" {
		t.Fatalf("output %q", all)
	}
	if _, err := tb.WriteStdin(ctx, "e", strings.NewReader("late"), false); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("WriteStdin after exit: %v", err)
	}
	if _, err := tb.WriteStdin(ctx, "none", nil, true); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("WriteStdin unknown: %v", err)
	}
}

func TestStdinClosed(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	ctx := context.Background()
	// Reads stdin to EOF, reports it, then runs until signalled.
	readAll := func(f *fake) (agentproto.ExitStatus, error) {
		var b []byte
		if f.stdin != nil {
			b, _ = io.ReadAll(f.stdin)
		}
		f.out("stdout", fmt.Sprintf("stdin=%q nil=%v\n", b, f.stdin == nil))
		return f.untilSignal()
	}
	if _, err := tb.Start(ctx, "open", argv("x"), nil, true, starter(readAll, nil)); err != nil {
		t.Fatal(err)
	}
	if n, err := tb.WriteStdin(ctx, "open", strings.NewReader("x"), true); n != 1 || err != nil {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	until(t, tb, "open", "stdin=\"x\" nil=false\n")
	if in, _ := tb.Get("open"); in.StdinOpen || in.State != agentproto.ProcRunning {
		t.Fatalf("info %+v", in)
	}
	if _, err := tb.WriteStdin(ctx, "open", strings.NewReader("y"), false); !errors.Is(err, agentproto.ErrProcStdinClosed) {
		t.Fatalf("WriteStdin after close: %v", err)
	}

	// Stdin bytes without stdinOpen: the command reads them, then EOF.
	info, err := tb.Start(ctx, "bytes", argv("x"), []byte("abc"), false, starter(readAll, nil))
	if err != nil || info.StdinOpen {
		t.Fatalf("Start = %+v, %v", info, err)
	}
	until(t, tb, "bytes", "stdin=\"abc\" nil=false\n")
	if _, err := tb.WriteStdin(ctx, "bytes", strings.NewReader("y"), false); !errors.Is(err, agentproto.ErrProcStdinClosed) {
		t.Fatalf("WriteStdin without stdinOpen: %v", err)
	}
	// Neither: /dev/null, a nil reader.
	if _, err := tb.Start(ctx, "null", argv("x"), nil, false, starter(readAll, nil)); err != nil {
		t.Fatal(err)
	}
	until(t, tb, "null", "stdin=\"\" nil=true\n")

	for _, id := range []string{"open", "bytes", "null"} {
		if err := tb.Signal(ctx, id, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		wait(t, tb, id)
	}
}

// failingReader returns data, then err.
type failingReader struct {
	data string
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// cancelReader returns its data once, cancelling a context first.
type cancelReader struct {
	data   string
	cancel func()
}

func (r *cancelReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, io.EOF
	}
	r.cancel()
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestWriteStdinCancelled: a write blocked on a command that does not read
// ends with the request's ctx; stdin stays open, the pending chunk is
// delivered later, before the next writer's bytes.
func TestWriteStdinCancelled(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	startReading := make(chan struct{})
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, true, starter(func(f *fake) (agentproto.ExitStatus, error) {
		<-startReading
		return echo(f)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n, err := tb.WriteStdin(ctx, "p", &cancelReader{data: "X", cancel: cancel}, true)
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	if in, _ := tb.Get("p"); !in.StdinOpen {
		t.Fatalf("stdin closed by a cancelled write: %+v", in)
	}
	// A failing reader leaves stdin open too (it waits for X's delivery
	// first, so the command must read now).
	close(startReading)
	n, err = tb.WriteStdin(context.Background(), "p", &failingReader{data: "Y", err: io.ErrUnexpectedEOF}, true)
	if n != 1 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	if n, err := tb.WriteStdin(context.Background(), "p", strings.NewReader("Z"), true); n != 1 || err != nil {
		t.Fatalf("WriteStdin = %d, %v", n, err)
	}
	wait(t, tb, "p")
	var all []byte
	tb.Output(context.Background(), "p", 0, false, func(c procs.Chunk) error { all = append(all, c.Data...); return nil })
	if string(all) != "XYZ" {
		t.Fatalf("output %q", all)
	}
}

// TestWriteStdinUnblockedByExit: a write blocked on a command that never
// reads fails with agentproto.ErrProcExited when the command ends.
func TestWriteStdinUnblockedByExit(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	started := make(chan *fake, 1)
	_, err := tb.Start(context.Background(), "p", argv("x"), nil, true, starter(func(f *fake) (agentproto.ExitStatus, error) {
		return f.untilSignal()
	}, started))
	if err != nil {
		t.Fatal(err)
	}
	<-started
	signalled := make(chan error, 1)
	r := &hookReader{data: "never read", hook: func() {
		go func() { signalled <- tb.Signal(context.Background(), "p", syscall.SIGKILL) }()
	}}
	if _, err := tb.WriteStdin(context.Background(), "p", r, false); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("WriteStdin = %v", err)
	}
	if err := <-signalled; err != nil {
		t.Fatal(err)
	}
}

// hookReader calls hook on its first Read.
type hookReader struct {
	data string
	hook func()
}

func (r *hookReader) Read(p []byte) (int, error) {
	if r.hook != nil {
		r.hook()
		r.hook = nil
	}
	if r.data == "" {
		return 0, io.EOF
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

func TestSignal(t *testing.T) {
	var ex exits
	tb := procs.NewTable(procs.Options{OnExit: ex.record})
	ctx := context.Background()
	if _, err := tb.Start(ctx, "p", argv("sleep"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		return f.untilSignal()
	}, nil)); err != nil {
		t.Fatal(err)
	}
	if err := tb.Signal(ctx, "p", syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	info := wait(t, tb, "p")
	if info.State != agentproto.ProcExited || info.Exit.Signal != 15 || info.Exit.ShellCode() != 143 {
		t.Fatalf("info %+v exit %+v", info, info.Exit)
	}
	if err := tb.Signal(ctx, "p", syscall.SIGTERM); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("Signal after exit: %v", err)
	}
	if err := tb.Signal(ctx, "q", syscall.SIGTERM); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("Signal unknown: %v", err)
	}
	tb.WaitWaiters()
	if got := ex.get("p"); len(got) != 1 || !reflect.DeepEqual(got[0], info) {
		t.Fatalf("OnExit calls %+v, want one with %+v", got, info)
	}
}

// TestSignalRace: the command ends between the table's check and the
// signal's delivery; the Proc's "done" error becomes agentproto.ErrProcExited.
func TestSignalRace(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	release := make(chan struct{})
	start := func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		return &doneProc{release: release}, nil
	}
	if _, err := tb.Start(context.Background(), "p", argv("x"), nil, false, start); err != nil {
		t.Fatal(err)
	}
	if err := tb.Signal(context.Background(), "p", syscall.SIGTERM); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("Signal = %v", err)
	}
	close(release)
	wait(t, tb, "p")
}

// doneProc runs until release, and its Signal always says "done".
type doneProc struct{ release chan struct{} }

func (p *doneProc) Pid() int { return 7 }
func (p *doneProc) Signal(context.Context, syscall.Signal) error {
	return fmt.Errorf("agent: signal: %w", agentproto.ErrProcExited)
}
func (p *doneProc) Wait() (agentproto.ExitStatus, error) {
	<-p.release
	return agentproto.ExitStatus{Code: 0}, nil
}

func TestLostAndStartFailure(t *testing.T) {
	var ex exits
	tb := procs.NewTable(procs.Options{OnExit: ex.record})
	ctx := context.Background()
	_, err := tb.Start(ctx, "lost", argv("x"), nil, true, starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "partial")
		return agentproto.ExitStatus{Code: -1}, fmt.Errorf("agent: exec x: %w: EOF", errDisconnected)
	}, nil))
	if err != nil {
		t.Fatal(err)
	}
	info := wait(t, tb, "lost")
	if info.State != agentproto.ProcLost || info.Exit != nil || info.StdinOpen || info.OutputBytes != 7 ||
		info.Error != "agent: exec x: agent: disconnected from guest agent: EOF" {
		t.Fatalf("lost info %+v", info)
	}
	if _, err := tb.WriteStdin(ctx, "lost", strings.NewReader("x"), false); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("WriteStdin on lost: %v", err)
	}

	// A start failure is reported by Wait with a status: exited.
	notFound := agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecNotFound, Error: "python4: command not found"}
	start := func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		return &endedProc{st: notFound}, nil
	}
	info, err = tb.Start(ctx, "nf", argv("python4"), nil, false, start)
	if err != nil {
		t.Fatal(err)
	}
	info = wait(t, tb, "nf")
	if info.State != agentproto.ProcExited || info.Pid != 0 || !reflect.DeepEqual(*info.Exit, notFound) || info.Exit.ShellCode() != 127 {
		t.Fatalf("start failure info %+v", info)
	}
	if err := tb.Signal(ctx, "nf", syscall.SIGTERM); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("Signal: %v", err)
	}
	// A killed command whose status arrived (ctx ended) is exited too.
	start = func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		return &endedProc{st: agentproto.ExitStatus{Code: -1, Signal: 9}, err: context.Canceled}, nil
	}
	if _, err := tb.Start(ctx, "killed", argv("x"), nil, false, start); err != nil {
		t.Fatal(err)
	}
	if info := wait(t, tb, "killed"); info.State != agentproto.ProcExited || info.Exit.Signal != 9 || info.Error != "" {
		t.Fatalf("killed info %+v", info)
	}

	// StartFunc errors are returned and leave nothing behind.
	boom := errors.New("agent: exec x: boom")
	_, err = tb.Start(ctx, "fail", argv("x"), []byte("in"), true, func(context.Context, agentproto.ExecRequest, io.Reader, io.Writer, io.Writer) (procs.Proc, error) {
		return nil, boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Start = %v", err)
	}
	if _, err := tb.Get("fail"); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("failed start kept: %v", err)
	}
	tb.WaitWaiters()
	for _, id := range []string{"lost", "nf", "killed"} {
		if got := ex.get(id); len(got) != 1 || got[0].ID != id {
			t.Fatalf("OnExit(%s) calls: %+v", id, got)
		}
	}
	if got := ex.get("fail"); len(got) != 0 {
		t.Fatalf("OnExit for a failed start: %+v", got)
	}
}

// endedProc has ended already.
type endedProc struct {
	st  agentproto.ExitStatus
	err error
}

func (p *endedProc) Pid() int { return 0 }
func (p *endedProc) Signal(context.Context, syscall.Signal) error {
	return agentproto.ErrProcExited
}
func (p *endedProc) Wait() (agentproto.ExitStatus, error) { return p.st, p.err }

func TestLifetimeContextKills(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	life, cancel := context.WithCancel(context.Background())
	if _, err := tb.Start(life, "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		return f.untilSignal()
	}, nil)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if info := wait(t, tb, "p"); info.State != agentproto.ProcExited || info.Exit.Signal != 9 {
		t.Fatalf("info %+v", info)
	}
}

func TestMaxProcesses(t *testing.T) {
	tb := procs.NewTable(procs.Options{MaxProcesses: 2})
	ctx := context.Background()
	long := starter(func(f *fake) (agentproto.ExitStatus, error) { return f.untilSignal() }, nil)
	short := starter(func(f *fake) (agentproto.ExitStatus, error) { return exit(0) }, nil)
	if _, err := tb.Start(ctx, "a", argv("x"), nil, false, short); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "a")
	if _, err := tb.Start(ctx, "b", argv("x"), nil, false, long); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Start(ctx, "b", argv("x"), nil, false, long); !errors.Is(err, agentproto.ErrProcExists) {
		t.Fatalf("reused id: %v", err)
	}
	if _, err := tb.Start(ctx, "c", argv("x"), nil, false, long); err != nil {
		t.Fatalf("Start c (evicts a): %v", err)
	}
	if _, err := tb.Get("a"); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("a not forgotten: %v", err)
	}
	if _, err := tb.Start(ctx, "d", argv("x"), nil, false, long); !errors.Is(err, agentproto.ErrProcLimit) || !strings.Contains(err.Error(), "all 2 kept processes still run") {
		t.Fatalf("Start d: %v", err)
	}
	var ids []string
	for _, in := range tb.List() {
		ids = append(ids, in.ID)
	}
	if !reflect.DeepEqual(ids, []string{"b", "c"}) {
		t.Fatalf("List ids %v", ids)
	}
	if err := tb.Signal(ctx, "b", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "b")
	if _, err := tb.Start(ctx, "d", argv("x"), nil, false, long); err != nil {
		t.Fatalf("Start d after b ended: %v", err)
	}
	ids = ids[:0]
	for _, in := range tb.List() {
		ids = append(ids, in.ID)
	}
	if !reflect.DeepEqual(ids, []string{"c", "d"}) {
		t.Fatalf("List ids %v", ids)
	}
	tb.CloseAll("test over")
}

func TestEmptyID(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	if _, err := tb.Start(context.Background(), "", argv("x"), nil, false, starter(echo, nil)); err == nil {
		t.Fatal("Start with an empty id succeeded")
	}
}

func TestCloseAll(t *testing.T) {
	var ex exits
	tb := procs.NewTable(procs.Options{OnExit: ex.record})
	ctx := context.Background()
	started := make(chan *fake, 2)
	long := starter(func(f *fake) (agentproto.ExitStatus, error) {
		f.out("stdout", "up\n")
		return f.untilSignal()
	}, started)
	if _, err := tb.Start(ctx, "done", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) { return exit(0) }, nil)); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "done")
	if _, err := tb.Start(ctx, "run", argv("x"), nil, true, long); err != nil {
		t.Fatal(err)
	}
	f := <-started
	until(t, tb, "run", "up\n")

	// A follower and a blocked stdin writer are released by CloseAll.
	followed := make(chan agentproto.ProcInfo, 1)
	go func() {
		info, err := tb.Output(ctx, "run", 0, true, func(procs.Chunk) error { return nil })
		if err != nil {
			t.Error(err)
		}
		followed <- info
	}()
	wrote := make(chan error, 1)
	go func() {
		_, err := tb.WriteStdin(ctx, "run", strings.NewReader("never read"), false)
		wrote <- err
	}()

	tb.CloseAll("sandbox removed")
	info, _ := tb.Get("run")
	if info.State != agentproto.ProcLost || info.Error != "sandbox removed" || info.StdinOpen || info.EndedNs == 0 {
		t.Fatalf("info after CloseAll %+v", info)
	}
	<-f.done // it got SIGKILL
	if f.st.Signal != 9 {
		t.Fatalf("fake ended with %+v", f.st)
	}
	if fi := <-followed; fi.State != agentproto.ProcLost {
		t.Fatalf("follower's info %+v", fi)
	}
	if err := <-wrote; !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("blocked WriteStdin: %v", err)
	}
	if _, err := tb.Start(ctx, "new", argv("x"), nil, false, long); !errors.Is(err, agentproto.ErrProcTableClosed) {
		t.Fatalf("Start after CloseAll: %v", err)
	}
	if in, _ := tb.Get("done"); in.State != agentproto.ProcExited {
		t.Fatalf("ended process changed: %+v", in)
	}
	tb.WaitWaiters()
	if got := ex.get("run"); len(got) != 1 || got[0].State != agentproto.ProcLost {
		t.Fatalf("OnExit(run) calls %+v", got)
	}
	if got := ex.get("done"); len(got) != 1 || got[0].State != agentproto.ProcExited {
		t.Fatalf("OnExit(done) calls %+v", got)
	}
	// Still lost, although the command's status arrived afterwards.
	if in, _ := tb.Get("run"); in.State != agentproto.ProcLost || in.Exit != nil {
		t.Fatalf("info %+v", in)
	}
}

// TestCloseAllDuringStart: the table closes while a StartFunc runs; the
// new command is killed and Start fails with agentproto.ErrProcTableClosed.
func TestCloseAllDuringStart(t *testing.T) {
	var ex exits
	tb := procs.NewTable(procs.Options{OnExit: ex.record})
	inStart, proceed := make(chan struct{}), make(chan struct{})
	var f *fake
	inner := starter(func(f *fake) (agentproto.ExitStatus, error) { return f.untilSignal() }, nil)
	start := func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		close(inStart)
		<-proceed
		p, err := inner(ctx, req, stdin, stdout, stderr)
		f = p.(*fake)
		return p, err
	}
	errc := make(chan error, 1)
	go func() {
		_, err := tb.Start(context.Background(), "p", argv("x"), nil, false, start)
		errc <- err
	}()
	<-inStart
	tb.CloseAll("sandbox stopped")
	close(proceed)
	if err := <-errc; !errors.Is(err, agentproto.ErrProcTableClosed) {
		t.Fatalf("Start = %v", err)
	}
	<-f.done
	if f.st.Signal != 9 {
		t.Fatalf("command not killed: %+v", f.st)
	}
	if _, err := tb.Get("p"); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("Get = %v", err)
	}
	tb.WaitWaiters()
	if got := ex.get("p"); len(got) != 0 {
		t.Fatalf("OnExit calls %+v", got)
	}
}

// TestConcurrentFollowers: many followers, started before and during the
// output, at various offsets, each get exactly the expected bytes once.
func TestConcurrentFollowers(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	const writes = 300
	var want []byte
	var wantStreams []string // per byte
	var parts []procs.Chunk
	for i := range writes {
		stream := "stdout"
		if i%3 == 1 {
			stream = "stderr"
		}
		s := fmt.Sprintf("line %d %s\n", i, strings.Repeat("x", i%17))
		parts = append(parts, procs.Chunk{Stream: stream, Data: []byte(s)})
		want = append(want, s...)
		for range s {
			wantStreams = append(wantStreams, stream)
		}
	}
	gate := make(chan struct{})
	if _, err := tb.Start(context.Background(), "p", argv("x"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		for i, p := range parts {
			if i == writes/2 {
				<-gate
			}
			f.out(p.Stream, string(p.Data))
		}
		return exit(5)
	}, nil)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	follow := func(offset int64) {
		defer wg.Done()
		next := offset
		info, err := tb.Output(context.Background(), "p", offset, true, func(c procs.Chunk) error {
			if c.Offset != next || len(c.Data) == 0 {
				return fmt.Errorf("chunk at %d (len %d), want %d", c.Offset, len(c.Data), next)
			}
			if !bytes.Equal(c.Data, want[c.Offset:c.Offset+int64(len(c.Data))]) {
				return fmt.Errorf("chunk at %d: wrong bytes %q", c.Offset, c.Data)
			}
			for i := range c.Data {
				if wantStreams[c.Offset+int64(i)] != c.Stream {
					return fmt.Errorf("chunk at %d: stream %s for byte %d", c.Offset, c.Stream, c.Offset+int64(i))
				}
			}
			next += int64(len(c.Data))
			return nil
		})
		if err != nil {
			t.Errorf("follower from %d: %v", offset, err)
			return
		}
		if next != int64(len(want)) || info.State != agentproto.ProcExited || info.Exit.Code != 5 || info.OutputBytes != int64(len(want)) {
			t.Errorf("follower from %d ended at %d with %+v", offset, next, info)
		}
	}
	for i := range 32 {
		wg.Add(1)
		go follow(int64(i * 37 % len(want)))
	}
	close(gate)
	for i := range 32 {
		wg.Add(1)
		go follow(int64(i * 101 % len(want)))
	}
	wg.Wait()
}

// TestOnExitBeforeVisible: OnExit runs before anyone can see the process
// ended, so what it records (the daemon's process.exit audit entry) is
// there when a client that saw the exit looks for it.
func TestOnExitBeforeVisible(t *testing.T) {
	entered, release := make(chan agentproto.ProcInfo, 1), make(chan struct{})
	tb := procs.NewTable(procs.Options{OnExit: func(info agentproto.ProcInfo) {
		entered <- info
		<-release
	}})
	ctx := context.Background()
	if _, err := tb.Start(ctx, "p", argv("true"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) {
		return agentproto.ExitStatus{Code: 3}, nil
	}, nil)); err != nil {
		t.Fatal(err)
	}
	var final agentproto.ProcInfo
	select {
	case final = <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("OnExit not called")
	}
	if final.State != agentproto.ProcExited || final.Exit == nil || final.Exit.Code != 3 || final.EndedNs == 0 {
		t.Fatalf("OnExit's info %+v, want exited with code 3 and ended_at", final)
	}
	if info, err := tb.Get("p"); err != nil || info.State != agentproto.ProcRunning {
		t.Fatalf("while OnExit runs: %+v, %v; want still running", info, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if info, err := tb.Wait(wctx, "p"); err == nil {
		t.Fatalf("Wait returned %+v while OnExit runs", info)
	}
	close(release)
	if info := wait(t, tb, "p"); info.State != agentproto.ProcExited || info.EndedNs != final.EndedNs {
		t.Fatalf("after OnExit: %+v, want exited at %v", info, final.EndedNs)
	}
}
