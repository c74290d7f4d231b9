package sandbox

import (
	"errors"
	"testing"
	"time"
)

func TestSetTimeout(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 0, 0, 0, time.UTC)
	sb := accountSandbox(ExecAccount{Limits: ExecLimits{TTLSeconds: 60, MaxExecs: 3}}, StateRunning, created, created)
	sb.removed = true // no manager to store the record: persist skips it, rec.Extra is still set
	now := created.Add(50*time.Second + 300*time.Millisecond)
	// Extending: expires two hours from now, rounded up to the second.
	exp, err := sb.SetTimeout(2*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if want := created.Add(2*time.Hour + 51*time.Second); !exp.Equal(want) || !sb.ExpiresAt().Equal(want) {
		t.Fatalf("expiry %v (ExpiresAt %v), want %v", exp, sb.ExpiresAt(), want)
	}
	if lim := sb.ExecAccount().Limits; lim.TTLSeconds != 7251 || lim.MaxExecs != 3 {
		t.Fatalf("limits %+v: want ttl 7251 s, max_execs kept", lim)
	}
	if why := sb.Expired(now.Add(2 * time.Hour)); why != "" {
		t.Fatalf("expired before its new expiry: %q", why)
	}
	if why := sb.Expired(exp); why != "ttl reached" {
		t.Fatalf("at its expiry: %q, want ttl reached", why)
	}
	// Shortening works too; activity never moves it.
	if exp, err = sb.SetTimeout(5*time.Second, now); err != nil || !exp.Equal(created.Add(56*time.Second)) {
		t.Fatalf("shortened: %v %v", exp, err)
	}
	sb.Touch()
	if !sb.ExpiresAt().Equal(exp) {
		t.Fatal("activity moved the expiry")
	}
	// The record's Extra keeps it (a restarted daemon reads it there).
	if a, _ := DecodeExecAccount(sb.Record().Extra); a.Limits.TTLSeconds != 56 {
		t.Fatalf("record keeps ttl %d, want 56", a.Limits.TTLSeconds)
	}
	for _, d := range []time.Duration{0, -time.Second, 999 * time.Millisecond, MaxTimeout + time.Second} {
		if _, err := sb.SetTimeout(d, now); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetTimeout(%s) = %v, want ErrInvalid", d, err)
		}
	}
	if !sb.ExpiresAt().Equal(exp) {
		t.Fatal("a refused timeout changed the expiry")
	}
	if (&Sandbox{}).ExpiresAt() != (time.Time{}) {
		t.Fatal("a sandbox without a TTL has an expiry")
	}
}
