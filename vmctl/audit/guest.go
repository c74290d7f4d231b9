package audit

import (
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Guest-caused entries are those the daemon writes for what a guest's
// own traffic made happen (the egress proxy's decisions, e.g.
// ActionEgressIntercept), not for a caller's request. Their strings are
// the guest's (the names and Hosts it sent, reasons quoting them) and so
// is their number: Log.AppendGuest bounds both, so that no guest can make
// one entry large or append so many that rotation deletes every other
// tenant's trail (before these bounds a 1 MiB Host header made a 3 MiB
// entry, and about 250 of them rotated a default log away).
const (
	// MaxFieldBytes is the most bytes a string of a guest-caused entry
	// keeps: every string in Args (also inside lists and maps), Error and
	// ErrorMessage. A longer one is cut (Cut) to this many bytes, its end
	// saying so and how long it was.
	MaxFieldBytes = 4 << 10
	// MaxGuestEntryBytes is the most bytes a guest-caused entry takes as
	// a line of the log (its JSON and newline). When its strings, cut to
	// MaxFieldBytes, still make it longer (JSON escapes of control bytes
	// take six bytes each), they are cut shorter, and as a last resort
	// its Args are replaced by one "cut" string.
	MaxGuestEntryBytes = 16 << 10
	// GuestBurst is how many guest-caused entries of one sandbox are
	// appended at once before GuestPerSecond applies: a token bucket per
	// sandbox, GuestBurst deep, refilled GuestPerSecond tokens a second.
	// Entries past it are dropped and counted (ActionGuestDropped).
	GuestBurst = 60
	// GuestPerSecond is the sustained rate of a sandbox's guest-caused
	// entries, in entries per second (see GuestBurst).
	GuestPerSecond = 1
)

// ActionGuestDropped is the entry that stands for a sandbox's
// guest-caused entries dropped over its rate (GuestBurst,
// GuestPerSecond), by caller "daemon", for the sandbox and tenant of the
// dropped entries; args "dropped" (how many), "since" (the first dropped
// entry's time, RFC 3339), "actions" (how many of each action) and
// "limit". It is appended just before the sandbox's next entry that is
// let through, or by Close.
const ActionGuestDropped = "audit.dropped"

// guestBuckets is how many sandboxes' buckets the log keeps before it
// forgets those that are full and owe no summary (such a bucket is the
// same as a new one).
const guestBuckets = 1024

// cutMarker ends a string Cut shortened, with its length in bytes.
const cutMarker = "…[cut: %d bytes]"

// Cut returns s if it is at most max bytes long, else its first bytes
// (cut at a UTF-8 boundary) followed by "…[cut: N bytes]" (N: len(s)),
// max bytes in all (the marker alone when max is shorter than it).
func Cut(s string, max int) string {
	if len(s) <= max {
		return s
	}
	marker := fmt.Sprintf(cutMarker, len(s))
	keep := max - len(marker)
	if keep <= 0 {
		return marker
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker
}

// AppendGuest appends e, a guest-caused entry (see MaxFieldBytes),
// bounded: its strings cut to MaxFieldBytes and the whole to
// MaxGuestEntryBytes, and at most GuestBurst at once, then GuestPerSecond,
// per sandbox (e.Sandbox). An entry over the rate is dropped (nil error)
// and counted; the next one let through is preceded by one
// ActionGuestDropped entry saying how many were dropped. A zero e.Time
// becomes the current time. Errors: those of Append.
func (l *Log) AppendGuest(e Entry) error {
	if e.Time.IsZero() {
		e.Time = l.guest.clock()
	}
	summary, ok := l.guest.admit(e)
	if summary != nil {
		if err := l.Append(*summary); err != nil {
			return err
		}
	}
	if !ok {
		return nil
	}
	return l.Append(boundGuest(e))
}

// guestLimiter is a Log's rate limit of guest-caused entries: a token
// bucket per sandbox.
type guestLimiter struct {
	mu      sync.Mutex
	buckets map[string]*guestBucket
	now     func() time.Time // nil: time.Now (tests set it)
}

// guestBucket is one sandbox's tokens and what it dropped since its last
// entry let through.
type guestBucket struct {
	tokens  float64
	last    time.Time // of the last refill
	dropped int
	since   time.Time      // the first dropped entry's time
	actions map[string]int // dropped entries per action
	tenant  string         // of the dropped entries
}

func (g *guestLimiter) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// refill adds the tokens earned since the last refill, up to GuestBurst.
func (b *guestBucket) refill(now time.Time) {
	if el := now.Sub(b.last); el > 0 {
		b.tokens = min(GuestBurst, b.tokens+el.Seconds()*GuestPerSecond)
	}
	b.last = now
}

// admit takes a token of e's sandbox: ok when there was one; else e is
// counted as dropped. summary, when not nil, is the ActionGuestDropped
// entry to append before e (there were drops and e is let through).
func (g *guestLimiter) admit(e Entry) (summary *Entry, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	if g.buckets == nil {
		g.buckets = map[string]*guestBucket{}
	}
	b := g.buckets[e.Sandbox]
	if b == nil {
		if len(g.buckets) >= guestBuckets {
			g.forgetIdle(now)
		}
		b = &guestBucket{tokens: GuestBurst, last: now}
		g.buckets[e.Sandbox] = b
	}
	b.refill(now)
	if b.tokens < 1 {
		if b.dropped == 0 {
			b.since, b.actions = e.Time, map[string]int{}
		}
		b.dropped++
		b.actions[e.Action]++
		b.tenant = e.Tenant
		return nil, false
	}
	b.tokens--
	if b.dropped > 0 {
		s := b.summary(e.Sandbox, now)
		return &s, true
	}
	return nil, true
}

// summary returns the ActionGuestDropped entry of b's drops at now and
// resets them.
func (b *guestBucket) summary(sandbox string, now time.Time) Entry {
	actions := make(map[string]any, len(b.actions))
	for a, n := range b.actions {
		actions[a] = n
	}
	e := Entry{
		Time: now, Sandbox: sandbox, Caller: "daemon", Tenant: b.tenant, Action: ActionGuestDropped,
		Args: map[string]any{
			"dropped": b.dropped,
			"since":   b.since.UTC().Format(time.RFC3339Nano),
			"actions": actions,
			"limit":   strconv.Itoa(GuestBurst) + " guest-caused entries at once, then " + strconv.Itoa(GuestPerSecond) + " a second, per sandbox",
		},
	}
	b.dropped, b.actions, b.tenant = 0, nil, ""
	return e
}

// forgetIdle removes the buckets that are full at now and owe no
// summary. Called with mu held.
func (g *guestLimiter) forgetIdle(now time.Time) {
	for id, b := range g.buckets {
		b.refill(now)
		if b.dropped == 0 && b.tokens >= GuestBurst {
			delete(g.buckets, id)
		}
	}
}

// pending returns the ActionGuestDropped entries still owed (drops not
// followed by an entry let through), sorted by sandbox, and resets them.
func (g *guestLimiter) pending() []Entry {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.clock()
	ids := make([]string, 0, len(g.buckets))
	for id, b := range g.buckets {
		if b.dropped > 0 {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	out := make([]Entry, len(ids))
	for i, id := range ids {
		out[i] = g.buckets[id].summary(id, now)
	}
	return out
}

// boundGuest returns e with its guest-controlled strings (Args, Error,
// ErrorMessage) cut to MaxFieldBytes, shorter still while its line
// passes MaxGuestEntryBytes, and as a last resort with its Args replaced.
// e itself (its Args) is not changed.
func boundGuest(e Entry) Entry {
	var c Entry
	for _, max := range []int{MaxFieldBytes, MaxFieldBytes / 4, MaxFieldBytes / 16, 64} {
		c = cutEntry(e, max)
		if line, err := encodeLine(c); err != nil || len(line) <= MaxGuestEntryBytes {
			return c // an encoding error is Append's to report
		}
	}
	c.Args = map[string]any{"cut": fmt.Sprintf("the args took more than %d bytes", MaxGuestEntryBytes)}
	return c
}

// cutEntry returns e with every string of its Args, Error and
// ErrorMessage cut to max bytes (Cut), its Args copied.
func cutEntry(e Entry, max int) Entry {
	e.Error, e.ErrorMessage = Cut(e.Error, max), Cut(e.ErrorMessage, max)
	if e.Args != nil {
		e.Args = cutValue(e.Args, max).(map[string]any)
	}
	return e
}

// cutValue returns v with every string in it (also in lists and maps,
// keys included) cut to max bytes, copying what it changes.
func cutValue(v any, max int) any {
	switch v := v.(type) {
	case string:
		return Cut(v, max)
	case []string:
		out := make([]string, len(v))
		for i, s := range v {
			out[i] = Cut(s, max)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = cutValue(x, max)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[Cut(k, max)] = cutValue(x, max)
		}
		return out
	case map[string]string:
		out := make(map[string]string, len(v))
		for k, s := range v {
			out[Cut(k, max)] = Cut(s, max)
		}
		return out
	}
	return v
}
