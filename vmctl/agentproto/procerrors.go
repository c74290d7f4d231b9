package agentproto

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Errors of detached processes, one definition for both ends: the guest
// agent's table (vmctl/guestagent/procs) fails with them and sends them
// as the proc-* error codes ([ProcError]); the host's view
// (vmctl/process) turns those codes back into them ([ProcSentinel]) and
// fails with them itself. They are wrapped with the process id (test with
// errors.Is). Each is an errdefs sentinel: those a client can act on
// with the category and the API's reason code; ErrProcExists and
// ErrProcTableClosed, agentbox's own failures (the daemon picks the ids;
// a closed table means the sandbox is going away), of
// errdefs.ErrInternal, answered 500 internal as before.
var (
	// ErrProcNotFound: no process with that id in the table (never
	// started, or forgotten to make room). Code: CodeNotFound.
	ErrProcNotFound = errdefs.New(errdefs.ErrNotFound, "", "process not found")
	// ErrProcExists: a start was given an id the table already holds.
	// Code: CodeExists.
	ErrProcExists = errdefs.New(errdefs.ErrInternal, "", "process id already in use")
	// ErrProcExited: the process has ended (exited or lost), so it takes
	// no more stdin and no signals. Code: CodeProcExited.
	ErrProcExited = errdefs.New(errdefs.ErrFailedPrecondition, "process_exited", "process has ended")
	// ErrProcStdinClosed: the process's stdin was never open (started
	// without stdinOpen) or was closed by a write with closeAfter. Code:
	// CodeStdinClosed.
	ErrProcStdinClosed = errdefs.New(errdefs.ErrFailedPrecondition, "stdin_closed", "process stdin is closed")
	// ErrProcDropped: the requested output offset fell out of the
	// process's output ring in the guest. The error is a
	// *ProcDroppedError with the numbers (on the wire:
	// ProcOutputEnd.Dropped).
	ErrProcDropped = errdefs.New(errdefs.ErrNotFound, "output_dropped", "process output dropped")
	// ErrProcLimit: the table holds its maximum of processes (the
	// guest's: ProcMax) and all of them still run. Code: CodeProcLimit.
	ErrProcLimit = errdefs.New(errdefs.ErrResourceExhausted, "exec_limit_reached", "too many processes")
	// ErrProcRunning: a forget was asked for a process that still runs.
	// Code: CodeProcRunning.
	ErrProcRunning = errdefs.New(errdefs.ErrFailedPrecondition, "process_running", "process still runs")
	// ErrProcNoTty: a resize of a process that runs without a terminal.
	// Code: CodeNoTty.
	ErrProcNoTty = errdefs.New(errdefs.ErrInvalidArgument, "", "process has no terminal")
	// ErrProcTableClosed: the table was closed (its sandbox, or the guest
	// agent, is going away) and starts no more processes. The guest sends
	// it as CodeUnsupported.
	ErrProcTableClosed = errdefs.New(errdefs.ErrInternal, "", "process table closed")
)

// ProcDroppedError is the error of a process's output read when the
// offset is below the oldest byte the guest still keeps.
// errors.Is(err, ErrProcDropped) holds for it.
type ProcDroppedError struct {
	// ID is the process id.
	ID string
	// Offset is the requested offset, in bytes of combined output.
	Offset int64
	// Dropped is how many of the oldest output bytes are gone: the
	// smallest offset that can still be read.
	Dropped int64
	// Kept is the size of the guest's output ring in bytes
	// (ProcRingBytes).
	Kept int
}

// Error says what was lost and where to resume.
func (e *ProcDroppedError) Error() string {
	return fmt.Sprintf("process %s: output from offset %d was dropped (the guest keeps the last %d bytes and the first %d bytes are gone): resume from offset %d or later",
		e.ID, e.Offset, e.Kept, e.Dropped, e.Dropped)
}

// Unwrap returns ErrProcDropped.
func (e *ProcDroppedError) Unwrap() error { return ErrProcDropped }

// procCodes pairs the detached-process errors with their codes, in the
// order ProcError tests them.
var procCodes = []struct {
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
}

// ProcError is the guest's side: it returns err as the *Error to send for
// it, with the code of the detached-process error it wraps
// (CodeUnsupported for ErrProcTableClosed) and err's text as the message.
// Other errors are returned as they are.
func ProcError(err error) error {
	for _, pc := range procCodes {
		if errors.Is(err, pc.err) {
			return &Error{Code: pc.code, Message: err.Error()}
		}
	}
	if errors.Is(err, ErrProcTableClosed) {
		return &Error{Code: CodeUnsupported, Message: err.Error()}
	}
	return err
}

// ProcSentinel is the host's side: it returns the guest's *Error in err
// as the detached-process error of its code, keeping the guest's text
// ("SENTINEL (MESSAGE)"). Errors of other codes (CodeUnsupported
// included: a closed guest table is the guest's failure) and errors that
// did not come from the guest are returned as they are.
func ProcSentinel(err error) error {
	var pe *Error
	if !errors.As(err, &pe) {
		return err
	}
	for _, pc := range procCodes {
		if pc.code == pe.Code {
			return fmt.Errorf("%w (%s)", pc.err, pe.Message)
		}
	}
	return err
}
