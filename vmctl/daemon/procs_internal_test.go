package daemon

import (
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/store"
)

// TestAdoptedAuditsAnEndOnce: a process that ended while no daemon ran is
// audited at adoption; one whose end a killed daemon audited but did not
// write to the history (the window in processExited) has its history
// ended without a second entry; one fully recorded is left alone.
func TestAdoptedAuditsAnEndOnce(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	lg, err := audit.Open(filepath.Join(dir, "audit"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	const id = "a00000000001"
	start := time.Now().UTC().Add(-time.Minute)
	if err := st.PutSandbox(sandbox.Record{ID: id, State: sandbox.StateRunning, CreatedAt: start}); err != nil {
		t.Fatal(err)
	}
	for _, e := range []store.Exec{
		{ID: "e000001", Sandbox: id, Detached: true, StartedAt: start},                                  // ended while no daemon ran
		{ID: "e000002", Sandbox: id, Detached: true, StartedAt: start},                                  // audited, history open
		{ID: "e000003", Sandbox: id, Detached: true, StartedAt: start, EndedAt: start.Add(time.Second)}, // recorded
	} {
		if err := st.PutExec(e); err != nil {
			t.Fatal(err)
		}
	}
	code := 3
	for _, e := range []audit.Entry{
		{Time: start.Add(2 * time.Second), ExecID: "e000002", ExitCode: &code},
		{Time: start.Add(-time.Hour), ExecID: "e000001", ExitCode: &code}, // another command's, under a reused ID
	} {
		e.Sandbox, e.Caller, e.Action = id, "daemon", audit.ActionProcessExit
		if err := lg.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	d := assemble(&core{store: st, audit: lg, log: slog.New(slog.DiscardHandler)})
	b := &box{sb: &sandbox.Sandbox{ID: id}}
	n := 0
	adopt := d.adopted(b, &n)
	ended := func(eid string) process.Info {
		return process.Info{ID: eid, State: process.StateExited, Exit: &agentproto.ExitStatus{Code: 3}, StartedAt: start, EndedAt: start.Add(2 * time.Second)}
	}
	if !adopt(ended("e000003")) || !adopt(ended("e000002")) {
		t.Fatal("a recorded end was taken over again")
	}
	if adopt(ended("e000001")) || n != 1 {
		t.Fatalf("an end no daemon recorded was not taken over (n=%d)", n)
	}
	h, err := st.Exec(id, "e000002")
	if err != nil || h.EndedAt.IsZero() || h.ExitCode == nil || *h.ExitCode != 3 {
		t.Fatalf("history of the audited end: %+v, %v; want it ended with exit code 3", h, err)
	}
	var exits []string
	lg.Read(audit.Filter{Sandbox: id}, func(e audit.Entry) error { exits = append(exits, e.ExecID); return nil })
	if len(exits) != 2 || exits[0] != "e000002" || exits[1] != "e000001" {
		t.Fatalf("audit entries %v, want the two written before: adoption writes none (processExited does)", exits)
	}
}
