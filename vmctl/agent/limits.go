package agent

import (
	"fmt"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Limits on what one answer of the guest may hold. The guest is not
// trusted (it runs whatever its tenant put there, as root): each quantity
// it reports is bounded here, before the host holds it. The numbers are
// in docs/security.md.
const (
	// MaxListEntries is the most entries List takes of one directory; a
	// guest that reports more is refused with ErrTooLarge.
	MaxListEntries = 100_000
	// MaxListBytes is the most bytes of JSON entries List takes of one
	// directory (about 300 bytes per entry at MaxListEntries); a guest
	// that sends more is refused with ErrTooLarge.
	MaxListBytes = 32 << 20
	// MaxProcs is the most detached processes ListProcesses takes of the
	// guest's table: the protocol's own bound (agentproto.ProcMax, what
	// the agent keeps). Each is adopted by the daemon with a goroutine
	// and a stream at every restart; a guest that reports more is refused
	// with ErrTooLarge and none is adopted.
	MaxProcs = agentproto.ProcMax
)

// ErrTooLarge is wrapped by the error of an answer over one of the limits
// above (a listing, the process table); the message names the limit and
// the count, and errdefs.Details carries them ("limit", "count"). It is
// of errdefs.ErrResourceExhausted with the reason "too_large" (413 in the
// REST API).
var ErrTooLarge = errdefs.New(errdefs.ErrResourceExhausted, "too_large", "too large")

// tooLarge is the ErrTooLarge error of what, count items against limit,
// with the hint; the details carry "limit" and "count".
func tooLarge(what string, count, limit int, hint string) error {
	return errdefs.WithDetails(ErrTooLarge.WithMessage(fmt.Sprintf("%s: more than %d, the limit: %s", what, limit, hint)), map[string]any{"limit": limit, "count": count})
}
