package cluster

import (
	"sync"
	"time"
)

// breaker stops a node that keeps failing creates from pulling more: after
// `failures` creates in a row fail with a 5xx (the node's fault, not the
// request's), it opens for a cooldown, doubled each time it opens again
// without a success in between; the first create after the cooldown
// closes it (success) or opens it again at once (failure).
type breaker struct {
	mu       sync.Mutex
	failures int           // threshold
	base     time.Duration // first cooldown
	now      func() time.Time

	streak   int           // failures in a row
	cooldown time.Duration // the next opening's
	until    time.Time     // open until
	last     string        // the last failure's message
}

func newBreaker(failures int, cooldown time.Duration) *breaker {
	return &breaker{failures: failures, base: cooldown, cooldown: cooldown, now: time.Now}
}

// allow reports whether the node may pull now (the breaker is closed or
// its cooldown is over).
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.now().Before(b.until)
}

// success records a create that worked: the breaker closes and its
// cooldown returns to the first one.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streak, b.cooldown, b.until, b.last = 0, b.base, time.Time{}, ""
}

// failure records a create that failed by the node's fault; it reports
// whether the breaker opened now.
func (b *breaker) failure(msg string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.streak++
	b.last = msg
	if b.streak < b.failures {
		return false
	}
	b.until = b.now().Add(b.cooldown)
	b.cooldown *= 2
	b.streak = b.failures - 1 // one more failure after the cooldown opens it again
	return true
}

// status returns the last error and when the breaker closes, while it is
// open; "" and zero when it is closed.
func (b *breaker) status() (string, time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.now().Before(b.until) {
		return "", time.Time{}
	}
	return b.last, b.until
}
