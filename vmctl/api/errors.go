package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is an API error: the HTTP status (RFC 9110 / RFC 6585 meaning), a
// stable machine-readable code and a message that says what to do. It is
// answered as {"error": {"code": ..., "message": ..., "details": ...}}.
type Error struct {
	// Status is the HTTP status code.
	Status int `json:"-"`
	// Code is stable across versions, e.g. "not_found"; see the Code*
	// constants.
	Code string `json:"code"`
	// Message is for people: what went wrong and what to do.
	Message string `json:"message"`
	// Details carries numbers a client may act on (e.g. capacity figures
	// for capacity_exceeded).
	Details map[string]any `json:"details,omitempty"`
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// ErrorResponse is the JSON body of every error answer.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Errorf returns an *Error with the status, code and formatted message.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// AsError returns err as an *Error; any other error becomes 500 internal
// with err's text.
func AsError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: err.Error()}
}

// Stable error codes, with the HTTP status each is answered with.
const (
	CodeBadRequest       = "bad_request"         // 400: malformed JSON, unknown field, wrong type, bad query
	CodeInvalidArgument  = "invalid_argument"    // 400: a value is out of range or malformed (ids, paths, names)
	CodeUnauthorized     = "unauthorized"        // 401: missing or wrong bearer token
	CodePermissionDenied = "permission_denied"   // 403: the guest refused the file operation (EACCES/EPERM)
	CodeNotFound         = "not_found"           // 404: no such sandbox, process, file or route
	CodeMethodNotAllowed = "method_not_allowed"  // 405
	CodeConflict         = "conflict"            // 409: the sandbox's state does not allow it (e.g. stop while creating)
	CodeFileExists       = "file_exists"         // 409: mkdir of an existing path
	CodeNameTaken        = "name_taken"          // 409: a sandbox already has that name
	CodeSandboxRunning   = "sandbox_running"     // 409: delete of a running sandbox without force
	CodeNotRunning       = "sandbox_not_running" // 409: exec/files on a sandbox that is not running
	CodeStdinClosed      = "stdin_closed"        // 409: stdin of a process without open stdin
	CodeProcessExited    = "process_exited"      // 409: stdin/kill of an ended process
	CodeOutputDropped    = "output_dropped"      // 410: offset older than the buffered output
	CodeTooLarge         = "payload_too_large"   // 413: request body over the limit
	CodeUnsupportedMedia = "unsupported_media"   // 415: wrong Content-Type
	CodeInvalidImage     = "invalid_image"       // 422: image dir missing or not a valid image
	CodeNotAFile         = "not_a_file"          // 422: download of a directory or special file
	CodeNotADirectory    = "not_a_directory"     // 422: list of a non-directory
	CodeCapacity         = "capacity_exceeded"   // 429: admission control refused the create
	CodeExecLimit        = "exec_limit_reached"  // 429: the sandbox's max_execs was reached
	CodeInternal         = "internal"            // 500
	CodeGuestError       = "guest_error"         // 500: the guest failed the operation (I/O error, disk full)
	CodeBootFailed       = "boot_failed"         // 500: the guest did not come up (message has the console)
	CodeUnavailable      = "unavailable"         // 503: libvirt unreachable or the daemon is shutting down
	CodeGuestDied        = "guest_died"          // 503: the guest died during the request
)
