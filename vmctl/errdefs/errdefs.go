// Package errdefs holds the error categories every layer of agentbox
// wraps (containerd's errdefs is the model): a lower package declares its
// sentinels with New, naming a category and, where the API answers it
// with its own stable code, a reason; callers test with errors.Is against
// the sentinel or its category. Fronts map categories and reasons once:
// the REST API in vmctl/api (ErrorFrom), the CLI in cmd/agentbox (exit
// statuses). The package depends on the standard library only.
package errdefs

import (
	"context"
	"errors"
)

// Error is a category, or a sentinel of a category with a stable reason.
// errors.Is(err, s) holds for every error that wraps the sentinel s, and
// errors.Is(err, c) for every error that wraps a sentinel of category c.
// Compare by identity: two sentinels with the same reason are different
// errors (e.g. a sandbox's and a snapshot's name_taken).
type Error struct {
	category *Error
	reason   string
	msg      string
}

// Error categories. Each says what the caller can do about the error, not
// which layer made it.
var (
	// ErrNotFound: the object (sandbox, process, file, snapshot) does not
	// exist.
	ErrNotFound = category("not found")
	// ErrAlreadyExists: the object to create exists already (a name, a
	// path).
	ErrAlreadyExists = category("already exists")
	// ErrConflict: the object's current state does not allow the change
	// (e.g. stop while it is being created); retrying later may succeed.
	ErrConflict = category("conflict")
	// ErrInvalidArgument: the request is malformed or a value is out of
	// range, whatever the state of the system; fix the request.
	ErrInvalidArgument = category("invalid argument")
	// ErrFailedPrecondition: the request is well-formed but the system is
	// not in the state it needs (the sandbox is not running, the path is a
	// directory, the host lacks the feature); change that state first.
	ErrFailedPrecondition = category("failed precondition")
	// ErrResourceExhausted: a limit or quota was reached (host capacity,
	// the sandbox's command budget, the disk).
	ErrResourceExhausted = category("resource exhausted")
	// ErrUnavailable: a service needed is down or going away (libvirt, the
	// guest, the daemon shutting down); retrying later may succeed.
	ErrUnavailable = category("unavailable")
	// ErrCanceled: the operation was cancelled by its caller.
	ErrCanceled = category("canceled")
	// ErrDeadlineExceeded: the operation ran out of time.
	ErrDeadlineExceeded = category("deadline exceeded")
	// ErrPermissionDenied: the caller is known but may not do this.
	ErrPermissionDenied = category("permission denied")
	// ErrUnauthenticated: the caller did not prove who it is.
	ErrUnauthenticated = category("unauthenticated")
	// ErrNotImplemented: this build or configuration cannot do it at all.
	ErrNotImplemented = category("not implemented")
	// ErrInternal: a failure of agentbox or of a layer below it that the
	// caller cannot fix.
	ErrInternal = category("internal")
)

func category(msg string) *Error { return &Error{msg: msg} }

// New returns a sentinel of category (one of the Err* categories above)
// with a stable reason code (e.g. "name_taken": lowercase, underscores,
// never changed once published; "" when the category says it all) and
// message (its Error text, e.g. "sandbox name taken").
func New(category *Error, reason, message string) *Error {
	if category == nil || category.category != nil {
		panic("errdefs.New: category must be one of the errdefs categories")
	}
	return &Error{category: category, reason: reason, msg: message}
}

// Error returns the message.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the category of a sentinel, nil for a category.
func (e *Error) Unwrap() error {
	if e.category == nil {
		return nil // a nil *Error in an error interface would not be nil
	}
	return e.category
}

// Reason returns the stable reason code ("" for a category or a sentinel
// without one).
func (e *Error) Reason() string { return e.reason }

// Category returns the category: e itself for a category.
func (e *Error) Category() *Error {
	if e.category == nil {
		return e
	}
	return e.category
}

// WithMessage returns an error whose text is msg and that errors.Is
// matches to e (and so to its category and reason), for a message that
// says more than the sentinel's without repeating it, as containerd's
// errdefs does.
func (e *Error) WithMessage(msg string) error { return &message{err: e, msg: msg} }

type message struct {
	err error
	msg string
}

func (m *message) Error() string { return m.msg }
func (m *message) Unwrap() error { return m.err }

// WithDetails returns err with details attached: numbers a client acts on
// (e.g. the capacity figures of a refused create), keyed by snake_case
// names. The text, category and reason stay err's; Details finds them
// through any later wrapping.
func WithDetails(err error, details map[string]any) error {
	return &detailed{err: err, details: details}
}

type detailed struct {
	err     error
	details map[string]any
}

func (d *detailed) Error() string { return d.err.Error() }
func (d *detailed) Unwrap() error { return d.err }

// Details returns the details attached to err by WithDetails (the
// outermost, if several), nil if none.
func Details(err error) map[string]any {
	var d *detailed
	if errors.As(err, &d) {
		return d.details
	}
	return nil
}

// HasReason reports whether err, or any error it wraps (errors.Join
// included), is a sentinel with that reason.
func HasReason(err error, reason string) bool {
	if reason == "" {
		return false
	}
	found := false
	walk(err, func(e error) bool {
		if s, ok := e.(*Error); ok && s.reason == reason {
			found = true
		}
		return found
	})
	return found
}

// walk calls f on err and the errors it wraps, depth first as errors.Is
// does, until f returns true.
func walk(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, f) {
				return true
			}
		}
	}
	return false
}

// categories lists the categories in the order Category tests them;
// ErrInternal, the weakest, is tested after them and after the context
// package's errors.
var categories = []*Error{
	ErrNotFound, ErrAlreadyExists, ErrConflict, ErrInvalidArgument, ErrFailedPrecondition,
	ErrResourceExhausted, ErrUnavailable, ErrCanceled, ErrDeadlineExceeded, ErrPermissionDenied,
	ErrUnauthenticated, ErrNotImplemented,
}

// Category returns the category of err: the first of the categories that
// errors.Is matches; ErrCanceled and ErrDeadlineExceeded also for the
// context package's errors; ErrInternal only when err has no other (an
// internal failure joined with a cancellation is a cancellation, as it
// was while the internal sentinels had no category); nil when err has
// none (an uncategorised error, which fronts treat as ErrInternal).
func Category(err error) *Error {
	for _, c := range categories {
		if errors.Is(err, c) {
			return c
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return ErrDeadlineExceeded
	case errors.Is(err, ErrInternal):
		return ErrInternal
	}
	return nil
}
