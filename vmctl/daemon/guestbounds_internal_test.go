package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// A guest that answers every directory with 10 subdirectories (a tree
// that never ends at depth 64) costs a walk api.MaxListEntries entries
// and is answered 413 too_large with the numbers; a tree under the limit
// is walked whole, depth first.
func TestWalkListBounded(t *testing.T) {
	calls := 0
	fanOut := func(_ context.Context, dir string) ([]agentproto.FileInfo, error) {
		calls++
		out := make([]agentproto.FileInfo, 10)
		for i := range out {
			out[i] = agentproto.FileInfo{Name: fmt.Sprint("d", i), Type: agentproto.TypeDir}
		}
		return out, nil
	}
	out, err := walkList(context.Background(), fanOut, "/", api.MaxListDepth)
	if out != nil || !errors.Is(err, agent.ErrTooLarge) {
		t.Fatalf("%d entries, %v", len(out), err)
	}
	ae := api.ErrorFrom(err)
	if ae.Status != 413 || ae.Code != "too_large" || ae.Details["limit"] != api.MaxListEntries || ae.Details["count"] != api.MaxListEntries+3 {
		t.Fatalf("answered %d %s %v: %s", ae.Status, ae.Code, ae.Details, ae.Message)
	}
	if m := ae.Message; !strings.HasPrefix(m, "listing / to depth 64 gives more than 100000 entries, the limit (100003 with /d0/d0/") || !strings.HasSuffix(m, "): list a subdirectory, or with a smaller depth") {
		t.Errorf("message %q", m)
	}
	// Depth first, a directory's entries appended one by one as its
	// subdirectories are walked, those at depth 64 not listed: the walk
	// stops at the listing that finds 99,993 entries held, its 10,054th.
	if calls != 10054 {
		t.Errorf("%d listings, want 10054", calls)
	}

	tree := map[string][]agentproto.FileInfo{
		"/r":   {{Name: "a", Type: agentproto.TypeDir}, {Name: "f", Type: agentproto.TypeFile}},
		"/r/a": {{Name: "g", Type: agentproto.TypeFile}},
	}
	out, err = walkList(context.Background(), func(_ context.Context, dir string) ([]agentproto.FileInfo, error) { return tree[dir], nil }, "/r", 2)
	var paths []string
	for _, e := range out {
		paths = append(paths, e.Path)
	}
	if err != nil || !reflect.DeepEqual(paths, []string{"/r/a", "/r/a/g", "/r/f"}) {
		t.Fatalf("%v, %v", paths, err)
	}
}

// The daemon's audit of a guest's violation and of a refused process
// table: who, what, the code and message of the error.
func TestAuditGuestRefusals(t *testing.T) {
	lg, err := audit.Open(filepath.Join(t.TempDir(), "audit"), audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lg.Close()
	c := &core{audit: lg, log: slog.New(slog.DiscardHandler)}
	c.tenants = newTenancy(Config{})
	v := fmt.Errorf("%w: the guest sent 5 pings", agentproto.ErrProtocolViolation)
	c.auditViolation(sandbox.Record{ID: "a00000000001", Tenant: "acme", State: sandbox.StateFailed, Reason: sandbox.ReasonProtocolViolation}, v)
	tl := errdefs.WithDetails(agent.ErrTooLarge.WithMessage("the guest reported 65 detached processes"), map[string]any{"limit": 64, "count": 65})
	c.auditRefusedProcs(&sandbox.Sandbox{ID: "a00000000002"}, fmt.Errorf("process: adopt: %w", tl))
	var got []audit.Entry
	if err := lg.Read(audit.Filter{}, func(e audit.Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d entries", len(got))
	}
	e := got[0]
	if e.Sandbox != "a00000000001" || e.Tenant != "acme" || e.Caller != "daemon" || e.Action != audit.ActionStateChange ||
		e.Args["state"] != "failed" || e.Args["reason"] != "agent_protocol_violation" || e.Error != "unavailable" || e.ErrorMessage != "agent protocol violation: the guest sent 5 pings" {
		t.Errorf("violation entry %+v", e)
	}
	e = got[1]
	if e.Sandbox != "a00000000002" || e.Caller != "daemon" || e.Action != audit.ActionReconcile || e.Args["result"] != "refused" || e.Args["what"] != "detached processes" ||
		e.Error != "too_large" || e.ErrorMessage != "process: adopt: the guest reported 65 detached processes" {
		t.Errorf("refused entry %+v", e)
	}
}
