package api

import "fmt"

// TimeoutRequest is the body of POST /v1/sandboxes/{id}/timeout (E2B's
// setTimeout): the sandbox expires TimeoutSeconds from now.
type TimeoutRequest struct {
	// TimeoutSeconds is how long from now the sandbox lives before the
	// daemon stops and removes it, 1..MaxTimeoutSeconds. It replaces the
	// TTL (longer or shorter); limits.ttl_seconds becomes the seconds
	// from creation to the new expiry, rounded up.
	TimeoutSeconds int64 `json:"timeout_seconds"`
}

// MaxTimeoutSeconds is the longest timeout: ten years.
const MaxTimeoutSeconds = 10 * 365 * 24 * 3600

// Validate checks the timeout's range. Errors are 400 invalid_argument.
func (r *TimeoutRequest) Validate() error {
	if r.TimeoutSeconds < 1 || r.TimeoutSeconds > MaxTimeoutSeconds {
		return Invalidf("timeout_seconds %d: want 1 to %d (seconds from now)", r.TimeoutSeconds, MaxTimeoutSeconds)
	}
	return nil
}

// MaxRestoreCount is the most sandboxes one restore request makes
// (RestoreRequest.Count).
const MaxRestoreCount = 64

// ForkName is the name of the i-th (1-based) sandbox of a restore of
// several: NAME-i.
func ForkName(name string, i int) string { return fmt.Sprintf("%s-%d", name, i) }

// validateCount checks a restore request's count and that every fork's
// name is a valid sandbox name.
func (r *RestoreRequest) validateCount() error {
	if r.Count < 0 || r.Count > MaxRestoreCount {
		return Invalidf("count %d: want 1 to %d sandboxes (0 or absent: 1)", r.Count, MaxRestoreCount)
	}
	if r.Count > 1 && r.Name != "" {
		if last := ForkName(r.Name, r.Count); !nameRE.MatchString(last) {
			return Invalidf("name %s is too long for %d sandboxes: %s would exceed 63 characters; choose a shorter name", QuoteShort(r.Name), r.Count, QuoteShort(last))
		}
	}
	return nil
}
