package process_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/process"
)

// switchGuest is a process.Guest whose agent connection can be replaced,
// as a sandbox's is when it resumes from disk.
type switchGuest struct {
	mu sync.Mutex
	c  *agent.Client
}

func (g *switchGuest) set(c *agent.Client) { g.mu.Lock(); g.c = c; g.mu.Unlock() }
func (g *switchGuest) get() *agent.Client  { g.mu.Lock(); defer g.mu.Unlock(); return g.c }

func (g *switchGuest) SpawnProcess(ctx context.Context, id string, req agentproto.ExecRequest, stdinData []byte, stdinOpen bool) (agentproto.ProcInfo, error) {
	return g.get().SpawnProcess(ctx, id, req, stdinData, stdinOpen)
}
func (g *switchGuest) ListProcesses(ctx context.Context) ([]agentproto.ProcInfo, error) {
	return g.get().ListProcesses(ctx)
}
func (g *switchGuest) GetProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	return g.get().GetProcess(ctx, id)
}
func (g *switchGuest) WaitProcess(ctx context.Context, id string) (agentproto.ProcInfo, error) {
	return g.get().WaitProcess(ctx, id)
}
func (g *switchGuest) ProcessOutput(ctx context.Context, id string, offset int64, follow bool, emit func(agentproto.ProcChunk) error) (agentproto.ProcOutputEnd, error) {
	return g.get().ProcessOutput(ctx, id, offset, follow, emit)
}
func (g *switchGuest) WriteProcessStdin(ctx context.Context, id string, r io.Reader, closeAfter bool) (int64, error) {
	return g.get().WriteProcessStdin(ctx, id, r, closeAfter)
}
func (g *switchGuest) SignalProcess(ctx context.Context, id string, sig syscall.Signal) error {
	return g.get().SignalProcess(ctx, id, sig)
}
func (g *switchGuest) ForgetProcess(ctx context.Context, id string) error {
	return g.get().ForgetProcess(ctx, id)
}
func (g *switchGuest) ResizeProcess(ctx context.Context, id string, size agentproto.TtySize) (agentproto.ProcInfo, error) {
	return g.get().ResizeProcess(ctx, id, size)
}

// TestSuspendResume: a table suspended before its guest's connection goes
// (a pause to disk) makes nothing lost and calls no OnExit; after Resume
// on the new connection the running processes are followed again (stdin,
// kill, their end with OnExit once), one that ended meanwhile gets its
// OnExit once, one the table did not know is adopted, and a second
// Resume changes nothing.
func TestSuspendResume(t *testing.T) {
	procs := guestagent.NewProcesses()
	defer procs.Close()
	ctx := context.Background()
	g := &switchGuest{c: dialGuest(t, procs)}
	var ex exits
	tb := process.NewTable(g, process.Options{OnExit: ex.record})
	if _, err := tb.Start(ctx, "p1", argv("sh", "-c", "echo a; read x; echo got:$x; exec sleep 1000"), nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := tb.Start(ctx, "p2", argv("sh", "-c", "read x; exit 7"), nil, true); err != nil {
		t.Fatal(err)
	}
	until(t, tb, "p1", 0, "a\n")

	tb.Suspend()
	tb.Suspend() // twice is once
	g.get().Close()
	time.Sleep(200 * time.Millisecond) // a watcher would have seen the connection's end by now
	for _, in := range tb.List(ctx) {
		if in.State != process.StateRunning {
			t.Errorf("%s while suspended: %+v, want running", in.ID, in)
		}
	}
	if got := ex.get("p1"); len(got) != 0 {
		t.Fatalf("OnExit while suspended: %+v", got)
	}

	// The guest is back on a new connection: p2 ended just before the
	// save; p3 was started by another host.
	c2 := dialGuest(t, procs)
	g.set(c2)
	if _, err := c2.WriteProcessStdin(ctx, "p2", nil, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.WaitProcess(ctx, "p2"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.SpawnProcess(ctx, "p3", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	var adopted []string
	if err := tb.Resume(ctx, func(in process.Info) bool { adopted = append(adopted, in.ID+"/"+in.State); return false }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(adopted, ",") != "p3/running" {
		t.Errorf("adopted %v, want p3 only", adopted)
	}
	if info := wait(t, tb, "p2"); info.State != process.StateExited || info.Exit.Code != 7 {
		t.Errorf("p2 after resume: %+v", info)
	}
	if n, err := tb.WriteStdin(ctx, "p1", strings.NewReader("x\n"), false); n != 2 || err != nil {
		t.Fatalf("WriteStdin after resume = %d, %v", n, err)
	}
	until(t, tb, "p1", 2, "got:x\n")
	if err := tb.Resume(ctx, func(in process.Info) bool { t.Errorf("adopted %s again", in.ID); return false }); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"p1", "p3"} {
		if err := tb.Signal(ctx, id, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if info := wait(t, tb, id); info.State != process.StateExited || info.Exit.Signal != 9 {
			t.Errorf("%s after kill: %+v", id, info)
		}
	}
	time.Sleep(100 * time.Millisecond) // a second watcher would call OnExit again
	for _, id := range []string{"p1", "p2", "p3"} {
		if got := ex.get(id); len(got) != 1 || got[0].State != process.StateExited {
			t.Errorf("OnExit(%s) calls %+v, want one", id, got)
		}
	}

	// Suspended, then closed (a sandbox stopped while paused to disk):
	// running ones are lost.
	if _, err := tb.Start(ctx, "p4", argv("sleep", "1000"), nil, false); err != nil {
		t.Fatal(err)
	}
	tb.Suspend()
	tb.CloseAll("sandbox stopped")
	if info, _ := tb.Get(ctx, "p4"); info.State != process.StateLost || info.Error != "sandbox stopped" {
		t.Fatalf("p4 after CloseAll: %+v", info)
	}
	if err := tb.Resume(ctx, nil); err != nil {
		t.Fatalf("Resume of a closed table: %v", err)
	}
}
