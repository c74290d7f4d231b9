package process_test

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/process"
)

// errAsleep is what a guest that cannot answer (its sandbox paused)
// fails every call with.
var errAsleep = errors.New("the guest is paused")

// TestRecall: a table made by a host that restarted while its guest was
// paused recalls the processes the previous host knew (as it saved them
// with the pause): they are listed and looked up with their last known
// Info while the guest cannot answer (calls on them fail with the
// guest's error, not ErrNotFound), nothing is lost or ended meanwhile,
// and after Resume they are followed again in the guest (stdin, output,
// their end with OnExit once); the guest's other processes are adopted.
func TestRecall(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	c := dialGuest(t, procs)
	if _, err := c.SpawnProcess(ctx, "p1", argv("sh", "-c", "echo a; read x; echo got:$x; exec sleep 1000"), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SpawnProcess(ctx, "p2", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	g := &switchGuest{}
	asleep := &asleepGuest{Guest: g, awake: make(chan struct{})}
	var ex exits
	tb := process.NewTable(asleep, process.Options{OnExit: ex.record})
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	tb.Recall([]process.Info{{ID: "p1", Pid: 42, Argv: []string{"sh", "-c", "…"}, State: process.StateRunning, StdinOpen: true,
		Tty: &agentproto.TtySize{Rows: 24, Cols: 80}, OutputBytes: 2, StartedAt: started}})

	list := tb.List(ctx)
	if len(list) != 1 || list[0].ID != "p1" || list[0].State != process.StateRunning || list[0].Pid != 42 || list[0].OutputBytes != 2 ||
		list[0].Tty == nil || list[0].Tty.Cols != 80 || !list[0].StartedAt.Equal(started) {
		t.Fatalf("recalled while the guest sleeps: %+v", list)
	}
	if err := tb.Signal(ctx, "p1", syscall.SIGTERM); !errors.Is(err, errAsleep) {
		t.Errorf("Signal while the guest sleeps: %v, want the guest's error", err)
	}
	if _, err := tb.WriteStdin(ctx, "p1", strings.NewReader("x"), false); !errors.Is(err, errAsleep) {
		t.Errorf("WriteStdin while the guest sleeps: %v, want the guest's error", err)
	}
	if _, err := tb.Output(ctx, "p1", 0, false, func(process.Chunk) error { return nil }); !errors.Is(err, errAsleep) {
		t.Errorf("Output while the guest sleeps: %v, want the guest's error", err)
	}
	time.Sleep(100 * time.Millisecond) // a watcher would have failed by now
	if in, err := tb.Get(ctx, "p1"); err != nil || in.State != process.StateRunning {
		t.Fatalf("p1 while the guest sleeps: %+v, %v; want running", in, err)
	}

	// The guest answers again.
	asleep.wake()
	g.set(c)
	var adopted []string
	if err := tb.Resume(ctx, func(in process.Info) bool { adopted = append(adopted, in.ID); return false }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(adopted, []string{"p2"}) {
		t.Errorf("adopted %v, want p2 only", adopted)
	}
	if n, err := tb.WriteStdin(ctx, "p1", strings.NewReader("x\n"), false); n != 2 || err != nil {
		t.Fatalf("WriteStdin after resume = %d, %v", n, err)
	}
	until(t, tb, "p1", 2, "got:x\n")
	for _, id := range []string{"p1", "p2"} {
		if err := tb.Signal(ctx, id, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if info := wait(t, tb, id); info.State != process.StateExited || info.Exit.Signal != 9 {
			t.Errorf("%s after kill: %+v", id, info)
		}
	}
	time.Sleep(100 * time.Millisecond)
	for _, id := range []string{"p1", "p2"} {
		if got := ex.get(id); len(got) != 1 {
			t.Errorf("OnExit(%s) calls %+v, want one", id, got)
		}
	}
}

// asleepGuest fails every call with errAsleep until wake.
type asleepGuest struct {
	process.Guest
	awake chan struct{}
}

func (g *asleepGuest) wake() { close(g.awake) }

func (g *asleepGuest) err() error {
	select {
	case <-g.awake:
		return nil
	default:
		return errAsleep
	}
}

func (g *asleepGuest) ListProcesses(ctx context.Context) ([]agentproto.ProcInfo, error) {
	if err := g.err(); err != nil {
		return nil, err
	}
	return g.Guest.ListProcesses(ctx)
}
func (g *asleepGuest) GetProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	if err := g.err(); err != nil {
		return agentproto.ProcInfo{}, err
	}
	return g.Guest.GetProcess(ctx, id)
}
func (g *asleepGuest) WaitProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	if err := g.err(); err != nil {
		return agentproto.ProcInfo{}, err
	}
	return g.Guest.WaitProcess(ctx, id)
}
func (g *asleepGuest) ProcessOutput(ctx context.Context, id string, offset int64, follow bool, emit func(agentproto.ProcChunk) error) (agentproto.ProcOutputEnd, error) {
	if err := g.err(); err != nil {
		return agentproto.ProcOutputEnd{}, err
	}
	return g.Guest.ProcessOutput(ctx, id, offset, follow, emit)
}
func (g *asleepGuest) WriteProcessStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	if err := g.err(); err != nil {
		return 0, err
	}
	return g.Guest.WriteProcessStdin(ctx, id, r, closeAfter)
}
func (g *asleepGuest) SignalProcess(ctx context.Context, id string, sig syscall.Signal) error {
	if err := g.err(); err != nil {
		return err
	}
	return g.Guest.SignalProcess(ctx, id, sig)
}
