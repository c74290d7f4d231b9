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
