package testenv

import (
	"testing"
	"time"
)

// WaitFor polls cond until it returns true, failing the test with t.Fatalf
// ("gave up after <timeout> waiting for <what>") when it still returns false
// after timeout. timeout is a bound against hangs, not a timing assertion:
// give it room for a loaded, shared host.
//
// cond is first called at once, then after 5 ms, the pause doubling after
// each false up to 100 ms: a condition that holds within milliseconds is
// seen within milliseconds, and an expensive one (a CLI run, an HTTP call)
// is not repeated more than ten times a second. cond runs on the caller's
// goroutine, so it may call t's methods; WaitFor must be called from the
// test's goroutine (t.Fatalf).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", timeout, what)
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// Receive returns the next value from ch, failing the test with t.Fatalf
// ("gave up after <timeout> waiting for <what>") when none came within
// timeout (a bound against hangs, not a timing assertion). A closed ch
// yields T's zero value at once. Call it from the test's goroutine.
func Receive[T any](t testing.TB, timeout time.Duration, what string, ch <-chan T) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("gave up after %s waiting for %s", timeout, what)
		panic("unreachable")
	}
}
