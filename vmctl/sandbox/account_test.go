package sandbox

import (
	"errors"
	"reflect"
	"testing"
	"time"
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

// TestBeginExecCounts: BeginExec hands its count the sandbox's
// accounting and keeps the changes it made; a count that refuses begins
// nothing (the sandbox stays idle).
func TestBeginExecCounts(t *testing.T) {
	started := time.Now().Add(-time.Minute)
	sb := accountSandbox(ExecAccount{Limits: ExecLimits{IdleTimeoutSeconds: 30}, ExecCount: 1}, StateRunning, started, started)
	if err := sb.BeginExec(func(a *ExecAccount) error { a.ExecCount++; return nil }); err != nil {
		t.Fatal(err)
	}
	if got := sb.ExecAccount().ExecCount; got != 2 {
		t.Fatalf("ExecCount = %d after a counted command, want 2", got)
	}
	sb.EndExec()
	refused := errors.New("refused")
	if err := sb.BeginExec(func(a *ExecAccount) error { return refused }); err != refused {
		t.Fatalf("BeginExec with a refusing count = %v, want its error", err)
	}
	if got := sb.Expired(time.Now().Add(time.Hour)); got != ExpiredIdle {
		t.Fatalf("after a refused command: Expired = %q, want %q (nothing in flight)", got, ExpiredIdle)
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
	if err := sb.BeginExec(func(*ExecAccount) error { return nil }); err != nil {
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
