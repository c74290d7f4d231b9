package sandbox

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestExecAccountFormat pins the JSON kept in Record.Extra: records
// written before the accounting moved into this package must read the
// same, and new ones must stay readable by older daemons.
func TestExecAccountFormat(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	a := ExecAccount{Limits: ExecLimits{TTLSeconds: 60, IdleTimeoutSeconds: 30, ExecTimeoutMs: 1500, MaxExecs: 3}, ExecCount: 2, LastActivity: at, Creator: "alice"}
	want := `{"limits":{"ttl_seconds":60,"idle_timeout_seconds":30,"exec_timeout_ms":1500,"max_execs":3},"exec_count":2,"last_activity":"2025-01-02T03:04:05Z","creator":"alice"}`
	if got := string(a.Encode()); got != want {
		t.Fatalf("Encode:\n got %s\nwant %s", got, want)
	}
	back, err := DecodeExecAccount([]byte(want))
	if err != nil || !reflect.DeepEqual(back, a) {
		t.Fatalf("DecodeExecAccount = %+v, %v; want %+v", back, err, a)
	}
	env := ExecAccount{Limits: ExecLimits{TTLAction: "pause-to-disk"}, Env: []string{"A=1"}}
	wantEnv := `{"limits":{"ttl_action":"pause-to-disk"},"exec_count":0,"env":["A=1"]}`
	if got := string(env.Encode()); got != wantEnv {
		t.Fatalf("Encode with env:\n got %s\nwant %s", got, wantEnv)
	}
	if back, err := DecodeExecAccount([]byte(wantEnv)); err != nil || !reflect.DeepEqual(back, env) {
		t.Fatalf("DecodeExecAccount = %+v, %v; want %+v", back, err, env)
	}
	if got := string((ExecAccount{}).Encode()); got != `{"limits":{},"exec_count":0}` {
		t.Fatalf("zero account encodes as %s", got)
	}
	if _, err := DecodeExecAccount([]byte("{")); err == nil {
		t.Fatal("DecodeExecAccount of broken JSON: no error")
	}
}

func accountSandbox(a ExecAccount, state State, created, started time.Time) *Sandbox {
	return &Sandbox{ID: "0123456789ab", life: newLife(),
		rec: Record{ID: "0123456789ab", State: state, CreatedAt: created, StartedAt: started, Extra: a.Encode()}}
}

func TestBeginExecCountsAgainstMaxExecs(t *testing.T) {
	sb := accountSandbox(ExecAccount{Limits: ExecLimits{MaxExecs: 2, ExecTimeoutMs: 700}, ExecCount: 1}, StateRunning, time.Now(), time.Now())
	id, req, err := sb.BeginExec(agentproto.ExecRequest{Argv: []string{"true"}})
	if err != nil || id != "e000002" || req.TimeoutMs != 700 {
		t.Fatalf("BeginExec = %q, timeout %d, %v; want e000002, 700 (the default), nil", id, req.TimeoutMs, err)
	}
	sb.EndExec()
	if _, req, _ := (&Sandbox{}).BeginExec(agentproto.ExecRequest{TimeoutMs: 5}); req.TimeoutMs != 5 {
		t.Fatalf("a request's own timeout became %d", req.TimeoutMs)
	}
	_, _, err = sb.BeginExec(agentproto.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, ErrExecLimit) || !errors.Is(err, errdefs.ErrResourceExhausted) || errdefs.Details(err)["max_execs"] != 2 {
		t.Fatalf("third command: err = %v (details %v), want ErrExecLimit, resource exhausted, max_execs 2", err, errdefs.Details(err))
	}
	if want := "sandbox 0123456789ab has run its 2 commands (max_execs): create a new sandbox"; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	if got := sb.ExecAccount().ExecCount; got != 2 {
		t.Fatalf("ExecCount = %d after a refused command, want 2", got)
	}
}

func TestExpired(t *testing.T) {
	now := time.Now()
	started := now.Add(-time.Minute)
	sb := accountSandbox(ExecAccount{Limits: ExecLimits{IdleTimeoutSeconds: 30}}, StateRunning, started, started)
	if got := sb.Expired(now); got != "idle timeout reached" {
		t.Fatalf("idle since its start a minute ago: Expired = %q", got)
	}
	done := sb.Busy()
	if got := sb.Expired(now); got != "" {
		t.Fatalf("busy: Expired = %q, want \"\"", got)
	}
	done() // records activity now
	if got := sb.Expired(now.Add(29 * time.Second)); got != "" {
		t.Fatalf("29 s after activity: Expired = %q, want \"\"", got)
	}
	if _, _, err := sb.BeginExec(agentproto.ExecRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := sb.Expired(now.Add(time.Hour)); got != "" {
		t.Fatalf("command running: Expired = %q, want \"\"", got)
	}
	sb.EndExec()
	if got := sb.Expired(time.Now().Add(31 * time.Second)); got != "idle timeout reached" {
		t.Fatalf("31 s after the command: Expired = %q", got)
	}
	stopped := accountSandbox(ExecAccount{Limits: ExecLimits{IdleTimeoutSeconds: 30}}, StateStopped, started, started)
	if got := stopped.Expired(now); got != "" {
		t.Fatalf("stopped sandbox: idle Expired = %q, want \"\"", got)
	}
	ttl := accountSandbox(ExecAccount{Limits: ExecLimits{TTLSeconds: 60}}, StateStopped, started, started)
	if got := ttl.Expired(now); got != "ttl reached" {
		t.Fatalf("TTL of 60 s after a minute: Expired = %q", got)
	}
	sb.Touch()
	if last := sb.ExecAccount().LastActivity; time.Since(last) > time.Second || last.Location() != time.UTC {
		t.Fatalf("Touch: LastActivity = %v", last)
	}
}

// TestBeginExecDefaultEnv: the sandbox's default environment comes
// before the command's own, which overrides it (the guest agent keeps
// the last entry of a key), and the account's slice is never shared.
func TestBeginExecDefaultEnv(t *testing.T) {
	sb := accountSandbox(ExecAccount{Env: []string{"A=1", "B=2"}}, StateRunning, time.Now(), time.Now())
	_, req, err := sb.BeginExec(agentproto.ExecRequest{Argv: []string{"env"}, Env: []string{"B=3"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "B=2", "B=3"}; !reflect.DeepEqual(req.Env, want) {
		t.Fatalf("env = %q, want %q", req.Env, want)
	}
	if got := sb.ExecAccount().Env; !reflect.DeepEqual(got, []string{"A=1", "B=2"}) {
		t.Fatalf("the account's env became %q", got)
	}
	sb.EndExec()
}

// TestClearTTL: a TTL action ends the TTL, so the sandbox no longer
// expires.
func TestClearTTL(t *testing.T) {
	created := time.Now().Add(-time.Hour)
	sb := accountSandbox(ExecAccount{Limits: ExecLimits{TTLSeconds: 60, TTLAction: "pause"}}, StateRunning, created, created)
	sb.removed = true // no manager to store the record: persist skips it, rec.Extra is still set
	if got := sb.Expired(time.Now()); got != ExpiredTTL {
		t.Fatalf("Expired = %q, want %q", got, ExpiredTTL)
	}
	sb.ClearTTL()
	if got := sb.Expired(time.Now()); got != "" || !sb.ExpiresAt().IsZero() {
		t.Fatalf("after ClearTTL: Expired = %q, ExpiresAt %v; want none", got, sb.ExpiresAt())
	}
	if a, _ := DecodeExecAccount(sb.Record().Extra); a.Limits.TTLSeconds != 0 || a.Limits.TTLAction != "pause" {
		t.Fatalf("the record keeps limits %+v, want no TTL and the action kept", a.Limits)
	}
}
