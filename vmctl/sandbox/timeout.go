package sandbox

import (
	"fmt"
	"time"
)

// MaxTimeout is the longest timeout SetTimeout accepts: ten years (a
// longer one is a mistake, and seconds since creation must fit the TTL).
const MaxTimeout = 10 * 365 * 24 * time.Hour

// SetTimeout makes the sandbox expire d after now (E2B's setTimeout):
// its TTL becomes the whole seconds from its creation to now+d, rounded
// up, so it is reaped at most a second after now+d, never before; a
// shorter d than the time left shortens it. It returns the new expiry
// (CreatedAt + TTL). The accounting is saved with the record, so a
// restarted daemon keeps it. Nothing else ever moves the expiry: using a
// sandbox does not extend it. Errors: ErrInvalid for d outside
// 1 s..MaxTimeout.
func (sb *Sandbox) SetTimeout(d time.Duration, now time.Time) (time.Time, error) {
	if d < time.Second || d > MaxTimeout {
		return time.Time{}, fmt.Errorf("%w: timeout %s: want 1s to %s from now", ErrInvalid, d, MaxTimeout)
	}
	sb.mu.Lock()
	created := sb.rec.CreatedAt
	sb.mu.Unlock()
	ttl := int64((now.Add(d).Sub(created) + time.Second - 1) / time.Second)
	acct := sb.account()
	acct.mu.Lock()
	acct.a.Limits.TTLSeconds = ttl
	acct.mu.Unlock()
	sb.SaveExecAccount()
	return created.Add(time.Duration(ttl) * time.Second), nil
}

// ExpiresAt is when the sandbox's TTL ends (CreatedAt + TTLSeconds), or
// the zero time without a TTL.
func (sb *Sandbox) ExpiresAt() time.Time {
	ttl := sb.ExecAccount().Limits.TTLSeconds
	if ttl <= 0 {
		return time.Time{}
	}
	return sb.Record().CreatedAt.Add(time.Duration(ttl) * time.Second)
}

// ClearTTL ends the sandbox's TTL (TTLSeconds 0: no expiry) and saves the
// accounting: what a TTL action other than remove does as it acts, so
// the stopped or paused sandbox stays until SetTimeout gives it a new
// one (E2B's autoPause and connect).
func (sb *Sandbox) ClearTTL() {
	acct := sb.account()
	acct.mu.Lock()
	acct.a.Limits.TTLSeconds = 0
	acct.mu.Unlock()
	sb.SaveExecAccount()
}
