package sandbox

import "github.com/agentbox/agentbox/vmctl/errdefs"

// Error categories of the sandbox manager, wrapped with %w. Each is an
// errdefs sentinel: its category, and the reason code the API answers.
var (
	// ErrInvalid: the request or configuration is wrong; the message says what to fix.
	ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "", "invalid sandbox request")
	// ErrGuestDied: the domain stopped (poweroff, crash, kernel panic) while it was needed.
	ErrGuestDied = errdefs.New(errdefs.ErrUnavailable, "guest_died", "guest died")
	// ErrBootTimeout: the guest agent did not answer the handshake in time.
	ErrBootTimeout = errdefs.New(errdefs.ErrInternal, "boot_failed", "guest agent did not come up")
)

// Lifecycle error categories, wrapped with %w.
var (
	// ErrNotFound: no sandbox with that ID or name.
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "", "sandbox not found")
	// ErrNameTaken: another sandbox has the requested name.
	ErrNameTaken = errdefs.New(errdefs.ErrAlreadyExists, "name_taken", "sandbox name taken")
	// ErrNotRunning: the operation needs a running sandbox.
	ErrNotRunning = errdefs.New(errdefs.ErrFailedPrecondition, "sandbox_not_running", "sandbox not running")
	// ErrRunning: the operation needs a stopped sandbox (remove without force).
	ErrRunning = errdefs.New(errdefs.ErrFailedPrecondition, "sandbox_running", "sandbox running")
	// ErrConflict: the sandbox's state does not allow the change.
	ErrConflict = errdefs.New(errdefs.ErrConflict, "", "sandbox state conflict")
	// ErrCannotStart: a stopped sandbox cannot boot again as it is (its
	// disk is gone, or its image changed under it); the message says
	// what to do. The sandbox's state, not the request, is at fault.
	ErrCannotStart = errdefs.New(errdefs.ErrFailedPrecondition, "", "sandbox cannot start")
)

// Exec error categories, wrapped with %w.
var (
	// ErrExecLimit: the sandbox has run the most commands its ExecLimits
	// allow (MaxExecs); a new sandbox is needed.
	ErrExecLimit = errdefs.New(errdefs.ErrResourceExhausted, "exec_limit_reached", "the sandbox's command budget is spent")
)

// Snapshot error categories, wrapped with %w.
var (
	// ErrNoSnapshot: the overlay holds no snapshot with that tag.
	ErrNoSnapshot = errdefs.New(errdefs.ErrNotFound, "", "snapshot not found")
	// ErrSnapshotExists: the overlay already holds a snapshot with that tag.
	ErrSnapshotExists = errdefs.New(errdefs.ErrAlreadyExists, "name_taken", "snapshot exists")
	// ErrSnapshotNameTaken: another snapshot has the requested name.
	ErrSnapshotNameTaken = errdefs.New(errdefs.ErrAlreadyExists, "name_taken", "snapshot name taken")
	// ErrSnapshotUnusable: the snapshot cannot be restored as it is (its
	// image changed or is gone, its overlay file is gone or corrupt); the
	// message says which and what to do.
	ErrSnapshotUnusable = errdefs.New(errdefs.ErrFailedPrecondition, "snapshot_unusable", "snapshot unusable")
	// ErrNoSpace: the host's disk filled up during a snapshot or a copy.
	ErrNoSpace = errdefs.New(errdefs.ErrResourceExhausted, "insufficient_storage", "host disk full")
	// ErrUnsupported: the driver cannot take snapshots (it does not
	// implement Snapshotter) or the sandbox predates snapshot support.
	ErrUnsupported = errdefs.New(errdefs.ErrNotImplemented, "", "snapshots unsupported")
	// ErrNoWarmTemplate: no warm template has the given key.
	ErrNoWarmTemplate = errdefs.New(errdefs.ErrNotFound, "", "warm template not found")
)
