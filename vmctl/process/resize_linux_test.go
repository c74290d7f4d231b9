package process_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/process"
)

// TestResize: a process on a terminal shows its size in its Info, Resize
// changes it in the guest (the command sees it) and in the table; after
// a host restart (a new Table that adopts it) it still has its terminal
// and takes input; resizing one without a terminal is an invalid
// argument that says why.
func TestResize(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	tb := process.NewTable(dialGuest(t, procs), process.Options{})
	req := argv("sh", "-c", `stty size; until read x; do :; done; stty size; read y; echo "y=$y"`)
	req.Tty = &agentproto.TtySize{Rows: 24, Cols: 80}
	info, err := tb.Start(ctx, "t1", req, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 24, Cols: 80}) || !info.StdinOpen {
		t.Fatalf("started on a terminal: tty %v, stdin open %v", info.Tty, info.StdinOpen)
	}
	until(t, tb, "t1", 0, "24 80\r\n")
	info, err = tb.Resize(ctx, "t1", agentproto.TtySize{Rows: 40, Cols: 100})
	if err != nil || info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 40, Cols: 100}) {
		t.Fatalf("Resize = tty %v, %v; want 40x100", info.Tty, err)
	}
	if _, err := tb.WriteStdin(ctx, "t1", strings.NewReader("a\n"), false); err != nil {
		t.Fatal(err)
	}
	until(t, tb, "t1", 0, "40 100\r\n")
	tb.Detach()

	tb2 := process.NewTable(dialGuest(t, procs), process.Options{})
	if err := tb2.Adopt(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if info, err := tb2.Get(ctx, "t1"); err != nil || info.Tty == nil || *info.Tty != (agentproto.TtySize{Rows: 40, Cols: 100}) {
		t.Fatalf("adopted: tty %v, %v; want 40x100", info.Tty, err)
	}
	if _, err := tb2.WriteStdin(ctx, "t1", strings.NewReader("b\n"), false); err != nil {
		t.Fatal(err)
	}
	if final := wait(t, tb2, "t1"); final.Exit == nil || final.Exit.Code != 0 || final.Tty == nil {
		t.Fatalf("final %+v", final)
	}
	if out, _ := streams(t, tb2, "t1", 0); out["stdout"] != "24 80\r\na\r\n40 100\r\nb\r\ny=b\r\n" {
		t.Fatalf("output %q", out)
	}
	if _, err := tb2.Resize(ctx, "t1", agentproto.TtySize{Rows: 1, Cols: 1}); !errors.Is(err, process.ErrExited) {
		t.Fatalf("Resize after the end: %v, want ErrExited", err)
	}

	if _, err := tb2.Start(ctx, "p1", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	_, err = tb2.Resize(ctx, "p1", agentproto.TtySize{Rows: 1, Cols: 1})
	if !errors.Is(err, process.ErrNoTty) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "only a process started with a terminal") {
		t.Fatalf("Resize without a terminal: %v, want ErrNoTty (invalid argument) saying why", err)
	}
	if _, err := tb2.Resize(ctx, "nope", agentproto.TtySize{Rows: 1, Cols: 1}); !errors.Is(err, process.ErrNotFound) {
		t.Fatalf("Resize of an unknown process: %v, want ErrNotFound", err)
	}
	tb2.CloseAll("test over")
}
