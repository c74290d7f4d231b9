package sandbox

import "errors"

// Error categories of the sandbox manager, wrapped with %w.
var (
	// ErrInvalid: the request or configuration is wrong; the message says what to fix.
	ErrInvalid = errors.New("invalid sandbox request")
	// ErrGuestDied: the domain stopped (poweroff, crash, kernel panic) while it was needed.
	ErrGuestDied = errors.New("guest died")
	// ErrBootTimeout: the guest agent did not answer the handshake in time.
	ErrBootTimeout = errors.New("guest agent did not come up")
)

// Lifecycle error categories, wrapped with %w.
var (
	// ErrNotFound: no sandbox with that ID or name.
	ErrNotFound = errors.New("sandbox not found")
	// ErrNameTaken: another sandbox has the requested name.
	ErrNameTaken = errors.New("sandbox name taken")
	// ErrNotRunning: the operation needs a running sandbox.
	ErrNotRunning = errors.New("sandbox not running")
	// ErrRunning: the operation needs a stopped sandbox (remove without force).
	ErrRunning = errors.New("sandbox running")
	// ErrConflict: the sandbox's state does not allow the change.
	ErrConflict = errors.New("sandbox state conflict")
)

// Snapshot error categories, wrapped with %w.
var (
	// ErrNoSnapshot: the overlay holds no snapshot with that tag.
	ErrNoSnapshot = errors.New("snapshot not found")
	// ErrSnapshotExists: the overlay already holds a snapshot with that tag.
	ErrSnapshotExists = errors.New("snapshot exists")
)
