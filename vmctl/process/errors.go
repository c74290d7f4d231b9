package process

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Sentinel errors of a Table. Methods return them wrapped with the process
// id (test with errors.Is); the guest's error codes (agentproto's
// CodeProcExited, CodeStdinClosed, CodeProcLimit, …) are mapped to them.
// Those a client can act on are errdefs sentinels (category and the API's
// reason code); ErrExists and ErrClosed are agentbox's own failures.
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
	// ErrDropped: the requested output offset fell out of the process's
	// output ring in the guest. The error is a *DroppedError with the
	// numbers.
	ErrDropped = errdefs.New(errdefs.ErrNotFound, "output_dropped", "process output dropped")
	// ErrTooMany: the table (or the guest's, agentproto.ProcMax) holds
	// its maximum of processes and all of them still run.
	ErrTooMany = errdefs.New(errdefs.ErrResourceExhausted, "exec_limit_reached", "too many processes")
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
	// Kept is the size of the guest's output ring in bytes
	// (agentproto.ProcRingBytes).
	Kept int
}

// Error says what was lost and where to resume.
func (e *DroppedError) Error() string {
	return fmt.Sprintf("process %s: output from offset %d was dropped (the guest keeps the last %d bytes and the first %d bytes are gone): resume from offset %d or later",
		e.ID, e.Offset, e.Kept, e.Dropped, e.Dropped)
}

// Unwrap returns ErrDropped.
func (e *DroppedError) Unwrap() error { return ErrDropped }
