package procs

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Sentinel errors of a Table. Methods return them wrapped with the process
// id (test with errors.Is). The guest agent sends them to the host as
// agentproto error codes (CodeNotFound, CodeProcExited, …), where
// vmctl/process maps them back to its own sentinels of the same names.
var (
	// ErrNotFound: no process with that id in the table (never started,
	// or forgotten to make room, see Options.MaxProcesses).
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "", "process not found")
	// ErrExists: Start was given an id the table already holds.
	ErrExists = errors.New("process id already in use")
	// ErrExited: the process has ended (exited or lost), so it takes no
	// more stdin and no signals.
	ErrExited = errdefs.New(errdefs.ErrFailedPrecondition, "process_exited", "process has ended")
	// ErrStdinClosed: the process's stdin was never open (started without
	// stdinOpen) or was closed by a WriteStdin with closeAfter.
	ErrStdinClosed = errdefs.New(errdefs.ErrFailedPrecondition, "stdin_closed", "process stdin is closed")
	// ErrDropped: the requested output offset fell out of the per-process
	// output buffer. The error is a *DroppedError with the numbers.
	ErrDropped = errdefs.New(errdefs.ErrNotFound, "output_dropped", "process output dropped")
	// ErrTooMany: the table holds Options.MaxProcesses processes and all
	// of them still run.
	ErrTooMany = errdefs.New(errdefs.ErrResourceExhausted, "exec_limit_reached", "too many processes")
	// ErrRunning: Forget was asked for a process that still runs.
	ErrRunning = errdefs.New(errdefs.ErrFailedPrecondition, "process_running", "process still runs")
	// ErrNoTty: Resize of a process that runs without a terminal.
	ErrNoTty = errdefs.New(errdefs.ErrInvalidArgument, "", "process has no terminal")
	// ErrClosed: the table was closed by CloseAll (its sandbox is going
	// away) and starts no more processes.
	ErrClosed = errors.New("process table closed")
)

// DroppedError is the error of Output when offset is below the oldest byte
// the buffer still holds. errors.Is(err, ErrDropped) holds for it.
type DroppedError struct {
	// ID is the process id.
	ID string
	// Offset is the requested offset, in bytes of combined output.
	Offset int64
	// Dropped is how many of the oldest output bytes are gone: the
	// smallest offset that can still be read.
	Dropped int64
	// Kept is the size of the output buffer in bytes
	// (Options.BufferBytes).
	Kept int
}

// Error says what was lost and where to resume.
func (e *DroppedError) Error() string {
	return fmt.Sprintf("process %s: output from offset %d was dropped (the buffer keeps the last %d bytes and the first %d bytes are gone): resume from offset %d or later",
		e.ID, e.Offset, e.Kept, e.Dropped, e.Dropped)
}

// Unwrap returns ErrDropped.
func (e *DroppedError) Unwrap() error { return ErrDropped }
