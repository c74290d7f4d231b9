package agentproto

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

// TestProcErrorRoundTrip: every detached-process error the guest sends
// arrives at the host as the same error, with the guest's text; a closed
// guest table and other errors stay what they are.
func TestProcErrorRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code ErrorCode
	}{
		{ErrProcNotFound, CodeNotFound},
		{ErrProcExists, CodeExists},
		{ErrProcExited, CodeProcExited},
		{ErrProcStdinClosed, CodeStdinClosed},
		{ErrProcLimit, CodeProcLimit},
		{ErrProcRunning, CodeProcRunning},
		{ErrProcNoTty, CodeNoTty},
	} {
		sent := ProcError(fmt.Errorf("process p1: %w: more", tc.err))
		var pe *Error
		if !errors.As(sent, &pe) || pe.Code != tc.code || pe.Message != "process p1: "+tc.err.Error()+": more" {
			t.Errorf("ProcError(%v) = %#v, want code %s with the text", tc.err, sent, tc.code)
			continue
		}
		got := ProcSentinel(fmt.Errorf("guest call: %w", sent))
		if !errors.Is(got, tc.err) || got.Error() != tc.err.Error()+" (process p1: "+tc.err.Error()+": more)" {
			t.Errorf("ProcSentinel(%s) = %v, want %v with the guest's text", tc.code, got, tc.err)
		}
	}

	closed := ProcError(fmt.Errorf("process p1: %w", ErrProcTableClosed))
	var pe *Error
	if !errors.As(closed, &pe) || pe.Code != CodeUnsupported {
		t.Errorf("ProcError(closed) = %#v, want CodeUnsupported", closed)
	}
	if got := ProcSentinel(closed); got != closed {
		t.Errorf("ProcSentinel(CodeUnsupported) = %v, want it unchanged", got)
	}
	if got := ProcError(io.ErrUnexpectedEOF); got != io.ErrUnexpectedEOF {
		t.Errorf("ProcError(other) = %v", got)
	}
	if got := ProcSentinel(io.ErrUnexpectedEOF); got != io.ErrUnexpectedEOF {
		t.Errorf("ProcSentinel(other) = %v", got)
	}
	de := error(&ProcDroppedError{ID: "p1", Offset: 3, Dropped: 10, Kept: ProcRingBytes})
	if !errors.Is(de, ErrProcDropped) || de.Error() != "process p1: output from offset 3 was dropped (the guest keeps the last 1048576 bytes and the first 10 bytes are gone): resume from offset 10 or later" {
		t.Errorf("dropped error %q", de)
	}
}
