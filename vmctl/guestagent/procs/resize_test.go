package procs_test

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/guestagent/procs"
)

// ttyFake is a fake on a terminal: Resize records the sizes.
type ttyFake struct {
	*fake
	sizes chan agentproto.TtySize
}

func (f ttyFake) Resize(size agentproto.TtySize) error {
	select {
	case <-f.done:
		return agentproto.ErrProcExited
	default:
	}
	f.sizes <- size
	return nil
}

func TestResize(t *testing.T) {
	tb := procs.NewTable(procs.Options{})
	ctx := context.Background()
	started := make(chan *fake, 2)
	sizes := make(chan agentproto.TtySize, 4)
	onTty := func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (procs.Proc, error) {
		p, err := starter(func(f *fake) (agentproto.ExitStatus, error) { return f.untilSignal() }, started)(ctx, req, stdin, stdout, stderr)
		if err != nil {
			return nil, err
		}
		return ttyFake{p.(*fake), sizes}, nil
	}
	req := argv("bash")
	req.Tty = &agentproto.TtySize{Rows: 24, Cols: 80}
	info, err := tb.Start(ctx, "t1", req, nil, true, onTty)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 24, Cols: 80}) {
		t.Fatalf("Start's Info.Tty = %v, want 24x80", info.Tty)
	}
	info, err = tb.Resize("t1", agentproto.TtySize{Rows: 50, Cols: 132})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-sizes; got != (agentproto.TtySize{Rows: 50, Cols: 132}) {
		t.Fatalf("the terminal got %+v, want 50x132", got)
	}
	if info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 50, Cols: 132}) {
		t.Fatalf("Resize's Info.Tty = %v, want 50x132", info.Tty)
	}
	if got, _ := tb.Get("t1"); got.Tty == nil || *got.Tty != (agentproto.TtySize{Rows: 50, Cols: 132}) {
		t.Fatalf("Get's Info.Tty = %v, want 50x132", got.Tty)
	}

	// Without a terminal: invalid argument, the fake is never asked.
	if _, err := tb.Start(ctx, "p1", argv("sleep"), nil, false, starter(func(f *fake) (agentproto.ExitStatus, error) { return f.untilSignal() }, started)); err != nil {
		t.Fatal(err)
	}
	if info, _ := tb.Get("p1"); info.Tty != nil {
		t.Fatalf("a process without a terminal has Tty %v", info.Tty)
	}
	_, err = tb.Resize("p1", agentproto.TtySize{Rows: 10, Cols: 10})
	if !errors.Is(err, agentproto.ErrProcNoTty) || !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Resize without a terminal: %v, want agentproto.ErrProcNoTty (invalid argument)", err)
	}
	if want := "process p1: process has no terminal: only a process started with a terminal (tty) has a size to change"; err.Error() != want {
		t.Fatalf("Resize without a terminal: %q, want %q", err, want)
	}
	if _, err := tb.Resize("nope", agentproto.TtySize{Rows: 10, Cols: 10}); !errors.Is(err, agentproto.ErrProcNotFound) {
		t.Fatalf("Resize of an unknown id: %v, want agentproto.ErrProcNotFound", err)
	}

	// Ended: agentproto.ErrProcExited, the last size stays in its Info.
	if err := tb.Signal(ctx, "t1", 9); err != nil {
		t.Fatal(err)
	}
	wait(t, tb, "t1")
	if _, err := tb.Resize("t1", agentproto.TtySize{Rows: 10, Cols: 10}); !errors.Is(err, agentproto.ErrProcExited) {
		t.Fatalf("Resize of an ended process: %v, want agentproto.ErrProcExited", err)
	}
	if len(sizes) != 0 {
		t.Fatalf("the terminal of an ended process was resized to %+v", <-sizes)
	}
	if got := wait(t, tb, "t1"); got.Tty == nil || *got.Tty != (agentproto.TtySize{Rows: 50, Cols: 132}) {
		t.Fatalf("ended Info.Tty = %v, want 50x132", got.Tty)
	}
	tb.CloseAll("test over")
}
