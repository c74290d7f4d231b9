package api

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestErrorTableRoundTrip: every row of the error table survives the trip
// category (or reason) → ErrorFrom → status and code on the wire → the
// *Error a client decodes, which matches the row's category (and its
// reason's sentinel). Categories answered with the very code and status
// of an earlier row read back as that row's.
func TestErrorTableRoundTrip(t *testing.T) {
	sameWire := map[*errdefs.Error]*errdefs.Error{
		errdefs.ErrAlreadyExists:    errdefs.ErrConflict,    // 409 conflict
		errdefs.ErrCanceled:         errdefs.ErrUnavailable, // 503 unavailable
		errdefs.ErrDeadlineExceeded: errdefs.ErrUnavailable, // 503 unavailable
	}
	firstStatus := map[string]int{}
	for _, m := range errorTable {
		if _, ok := firstStatus[m.code]; !ok {
			firstStatus[m.code] = m.status
		}
		var err error = m.category
		if m.byReason {
			err = errdefs.New(m.category, m.code, "sentinel "+m.code)
		}
		got := ErrorFrom(err)
		if got.Status != m.status || got.Code != m.code {
			t.Errorf("ErrorFrom(%v) = %d %s; want %d %s", err, got.Status, got.Code, m.status, m.code)
			continue
		}
		wire := &Error{Status: got.Status, Code: got.Code}
		want := m.category
		if c, ok := sameWire[m.category]; ok && !m.byReason {
			want = c
		}
		if errdefs.Category(wire) != want {
			t.Errorf("%d %s reads back as %v; want %v", m.status, m.code, errdefs.Category(wire), want)
		}
		if m.byReason && !errors.Is(wire, err) {
			t.Errorf("%d %s does not match its reason's sentinel", m.status, m.code)
		}
	}
	// In a stream only the code travels: its status is its first row's.
	for code, status := range firstStatus {
		if StatusOf(code) != status {
			t.Errorf("StatusOf(%s) = %d, want %d", code, StatusOf(code), status)
		}
	}
	if StatusOf("what") != 500 || categoryOf("what", 404) != errdefs.ErrInternal {
		t.Error("an unknown code is 500 internal")
	}
}
