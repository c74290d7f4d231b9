package agentproto

import (
	"errors"
	"io/fs"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrorCode is the stable, machine-readable category of an operation error
// reported by the guest in a [FrameError] frame. The string values are part
// of the protocol and never change.
type ErrorCode string

// Error codes carried by [Error].
const (
	// CodeNotFound: the path (or a parent of it) does not exist.
	CodeNotFound ErrorCode = "not-found"
	// CodeExists: the path already exists and the operation does not
	// replace it.
	CodeExists ErrorCode = "exists"
	// CodePermission: the guest agent lacks permission.
	CodePermission ErrorCode = "permission"
	// CodeInvalid: the request is malformed (relative path, bad mode,
	// unknown op, empty argv, a directory where a file is needed…).
	CodeInvalid ErrorCode = "invalid"
	// CodeIO: any other failure of the guest (disk full, I/O error…).
	CodeIO ErrorCode = "io"
	// CodeUnsupported: the guest agent does not implement the operation in
	// its current configuration (for example shutdown when not allowed).
	CodeUnsupported ErrorCode = "unsupported"
)

// Error is an operation error reported by the guest, the JSON payload of a
// [FrameError] frame. Host callers get it as *Error and can use errors.As to
// read Code. errors.Is also matches the io/fs sentinels: CodeNotFound is
// fs.ErrNotExist, CodeExists fs.ErrExist, CodePermission fs.ErrPermission
// and CodeInvalid fs.ErrInvalid; and any *Error target with the same Code.
// It unwraps to its errdefs category (Unwrap).
type Error struct {
	// Code is the error category.
	Code ErrorCode `json:"code"`
	// Message is a human-readable description, usually naming the path.
	Message string `json:"message"`
}

// Error returns the message prefixed with the code.
func (e *Error) Error() string {
	return "guest: " + string(e.Code) + ": " + e.Message
}

// Sentinels an *Error unwraps to where its category alone would not say
// what the API answers.
var (
	// ErrFileExists is what an *Error with CodeExists unwraps to.
	ErrFileExists = errdefs.New(errdefs.ErrAlreadyExists, "file_exists", "file exists")
	// ErrGuestFailed is what an *Error with CodeIO, CodeUnsupported or an
	// unknown code unwraps to: the guest failed the operation.
	ErrGuestFailed = errdefs.New(errdefs.ErrInternal, "guest_error", "the guest failed the operation")
)

// Unwrap returns the errdefs category of e.Code: errdefs.ErrNotFound for
// CodeNotFound, ErrFileExists for CodeExists, errdefs.ErrPermissionDenied
// for CodePermission, errdefs.ErrFailedPrecondition for CodeInvalid (the
// request reached the guest well-formed; the guest's state refused it) and
// the proc-* state codes, errdefs.ErrResourceExhausted for CodeProcLimit,
// else ErrGuestFailed.
func (e *Error) Unwrap() error {
	switch e.Code {
	case CodeNotFound:
		return errdefs.ErrNotFound
	case CodeExists:
		return ErrFileExists
	case CodePermission:
		return errdefs.ErrPermissionDenied
	case CodeInvalid, CodeProcExited, CodeProcRunning, CodeStdinClosed:
		return errdefs.ErrFailedPrecondition
	case CodeProcLimit:
		return errdefs.ErrResourceExhausted
	}
	return ErrGuestFailed
}

// Is reports whether target is the fs sentinel matching e.Code, or an *Error
// with the same Code.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	switch e.Code {
	case CodeNotFound:
		return target == fs.ErrNotExist
	case CodeExists:
		return target == fs.ErrExist
	case CodePermission:
		return target == fs.ErrPermission
	case CodeInvalid:
		return target == fs.ErrInvalid
	}
	return false
}
