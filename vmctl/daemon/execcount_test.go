package daemon

import (
	"errors"
	"reflect"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// TestExecCount: a command is counted against the sandbox's max_execs
// and named in start order, gets the sandbox's default timeout when its
// request gives none, and is refused once the budget is spent (nothing
// counted).
func TestExecCount(t *testing.T) {
	a := &sandbox.ExecAccount{Limits: sandbox.ExecLimits{MaxExecs: 2, ExecTimeoutMs: 700}, ExecCount: 1}
	id, req, err := execCount(a, "0123456789ab", agentproto.ExecRequest{Argv: []string{"true"}})
	if err != nil || id != "e000002" || req.TimeoutMs != 700 {
		t.Fatalf("execCount = %q, timeout %d, %v; want e000002, 700 (the default), nil", id, req.TimeoutMs, err)
	}
	if _, req, _ := execCount(&sandbox.ExecAccount{}, "0123456789ab", agentproto.ExecRequest{TimeoutMs: 5}); req.TimeoutMs != 5 {
		t.Fatalf("a request's own timeout became %d", req.TimeoutMs)
	}
	_, _, err = execCount(a, "0123456789ab", agentproto.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, sandbox.ErrExecLimit) || !errors.Is(err, errdefs.ErrResourceExhausted) || errdefs.Details(err)["max_execs"] != 2 {
		t.Fatalf("third command: err = %v (details %v), want ErrExecLimit, resource exhausted, max_execs 2", err, errdefs.Details(err))
	}
	if want := "sandbox 0123456789ab has run its 2 commands (max_execs): create a new sandbox"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if a.ExecCount != 2 {
		t.Fatalf("ExecCount = %d after a refused command, want 2", a.ExecCount)
	}
}

// TestExecCountDefaultEnv: the sandbox's default environment comes
// before the command's own, which overrides it (the guest agent keeps
// the last entry of a key), and the account's slice is never shared.
func TestExecCountDefaultEnv(t *testing.T) {
	a := &sandbox.ExecAccount{Env: []string{"A=1", "B=2"}}
	_, req, err := execCount(a, "0123456789ab", agentproto.ExecRequest{Argv: []string{"env"}, Env: []string{"B=3"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "B=2", "B=3"}; !reflect.DeepEqual(req.Env, want) {
		t.Fatalf("env = %q, want %q", req.Env, want)
	}
	if !reflect.DeepEqual(a.Env, []string{"A=1", "B=2"}) {
		t.Fatalf("the account's env became %q", a.Env)
	}
}
