package api

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Error is an API error: the HTTP status (RFC 9110 / RFC 6585 meaning), a
// stable machine-readable code and a message that says what to do. It is
// answered as {"error": {"code": ..., "message": ..., "details": ...}}.
//
// An *Error a client received matches with errors.Is the errdefs category
// of its code (Unwrap) and any errdefs sentinel whose reason is its code
// (Is): errors.Is(err, errdefs.ErrNotFound) for a 404 not_found,
// errors.Is(err, sandbox.ErrNameTaken) for a 409 name_taken.
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

// Unwrap returns the errdefs category of e.Code answered with e.Status
// (a 422 invalid_argument is errdefs.ErrFailedPrecondition, a 400 one
// errdefs.ErrInvalidArgument; see StatusOf for errors of a stream),
// errdefs.ErrInternal for an unknown code.
func (e *Error) Unwrap() error { return categoryOf(e.Code, e.Status) }

// Is reports whether target is an errdefs sentinel whose reason is e.Code
// and whose category is e's.
func (e *Error) Is(target error) bool {
	var s *errdefs.Error
	if !errors.As(target, &s) || s.Reason() == "" {
		return false
	}
	return s.Reason() == e.Code && s.Category() == categoryOf(e.Code, e.Status)
}

// ErrorResponse is the JSON body of every error answer.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Errorf returns an *Error with the status, code and formatted message.
// Fronts answer errors through ErrorFrom; Errorf is for errors that are
// already the API's (a fake backend's, the HTTP layer's own).
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Stable error codes, with the HTTP status each is answered with.
const (
	CodeBadRequest       = "bad_request"         // 400: malformed JSON, unknown field, wrong type, bad query
	CodeInvalidArgument  = "invalid_argument"    // 400: a value is out of range or malformed (ids, paths, names); 422: well-formed but the host or guest cannot do it
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
	CodeOverLimit        = "too_large"           // 413: what the guest answered (a listing, its process table) is over a limit; message and details ("limit", "count") name it
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

// mapping is one row of the error table: errors of category are answered
// with status and code; when byReason is set, only those that carry a
// sentinel whose reason is code.
type mapping struct {
	category *errdefs.Error
	byReason bool
	status   int
	code     string
}

// errorTable is THE map from errdefs categories and reasons to HTTP status
// and stable code, for every front. ErrorFrom takes the first row that
// matches (reasons are tested anywhere in the error's tree, so a joined
// "not running" and "guest died" is guest_died); the rows of a reason
// come before their category's. A reason's code is the reason itself.
// Read backwards (a code and status a client received), the first row
// with both is taken: a 409 conflict is ErrConflict (ErrAlreadyExists
// without a reason is answered the same), a 503 unavailable ErrUnavailable
// (ErrCanceled and ErrDeadlineExceeded too).
var errorTable = []mapping{
	// Reasons (byReason): the sentinels whose reason is the code.
	{errdefs.ErrResourceExhausted, true, http.StatusInsufficientStorage, CodeInsufficientStorage},
	{errdefs.ErrFailedPrecondition, true, http.StatusUnprocessableEntity, CodeSnapshotUnusable},
	{errdefs.ErrAlreadyExists, true, http.StatusConflict, CodeNameTaken},
	{errdefs.ErrFailedPrecondition, true, http.StatusConflict, CodeSandboxRunning},
	{errdefs.ErrUnavailable, true, http.StatusServiceUnavailable, CodeGuestDied},
	{errdefs.ErrFailedPrecondition, true, http.StatusConflict, CodeNotRunning},
	{errdefs.ErrInternal, true, http.StatusInternalServerError, CodeBootFailed},
	{errdefs.ErrFailedPrecondition, true, http.StatusConflict, CodeProcessExited},
	{errdefs.ErrFailedPrecondition, true, http.StatusConflict, CodeStdinClosed},
	{errdefs.ErrNotFound, true, http.StatusGone, CodeOutputDropped},
	{errdefs.ErrResourceExhausted, true, http.StatusTooManyRequests, CodeExecLimit},
	{errdefs.ErrResourceExhausted, true, http.StatusTooManyRequests, CodeCapacity},
	{errdefs.ErrResourceExhausted, true, http.StatusTooManyRequests, CodeTenantQuota},
	{errdefs.ErrAlreadyExists, true, http.StatusConflict, CodeFileExists},
	{errdefs.ErrInternal, true, http.StatusInternalServerError, CodeGuestError},
	{errdefs.ErrInvalidArgument, true, http.StatusUnprocessableEntity, CodeInvalidImage},
	{errdefs.ErrFailedPrecondition, true, http.StatusUnprocessableEntity, CodeNotAFile},
	{errdefs.ErrFailedPrecondition, true, http.StatusUnprocessableEntity, CodeNotADirectory},
	{errdefs.ErrInvalidArgument, true, http.StatusBadRequest, CodeBadRequest},
	{errdefs.ErrInvalidArgument, true, http.StatusRequestEntityTooLarge, CodeTooLarge},
	{errdefs.ErrResourceExhausted, true, http.StatusRequestEntityTooLarge, CodeOverLimit},
	{errdefs.ErrInvalidArgument, true, http.StatusUnsupportedMediaType, CodeUnsupportedMedia},
	{errdefs.ErrNotImplemented, true, http.StatusMethodNotAllowed, CodeMethodNotAllowed},
	{errdefs.ErrNotFound, true, http.StatusNotFound, CodeTemplateNotFound},
	{errdefs.ErrPermissionDenied, true, http.StatusForbidden, CodePolicyDenied},
	{errdefs.ErrUnavailable, true, http.StatusServiceUnavailable, CodePolicyUnavailable},
	{errdefs.ErrResourceExhausted, true, http.StatusTooManyRequests, CodeQueueTimeout},
	{errdefs.ErrUnavailable, true, http.StatusServiceUnavailable, CodeClusterUnavailable},
	{errdefs.ErrUnavailable, true, http.StatusServiceUnavailable, CodeNodeUnreachable},

	// Categories, for errors without one of the reasons above.
	{errdefs.ErrNotFound, false, http.StatusNotFound, CodeNotFound},
	{errdefs.ErrConflict, false, http.StatusConflict, CodeConflict},
	{errdefs.ErrAlreadyExists, false, http.StatusConflict, CodeConflict},
	{errdefs.ErrInvalidArgument, false, http.StatusBadRequest, CodeInvalidArgument},
	// Well-formed but refused by the host or the guest (a resource the
	// host cannot enforce, the guest's EINVAL): 422, with the code
	// invalid_argument the API has always answered.
	{errdefs.ErrFailedPrecondition, false, http.StatusUnprocessableEntity, CodeInvalidArgument},
	{errdefs.ErrPermissionDenied, false, http.StatusForbidden, CodePermissionDenied},
	{errdefs.ErrUnauthenticated, false, http.StatusUnauthorized, CodeUnauthorized},
	{errdefs.ErrResourceExhausted, false, http.StatusTooManyRequests, CodeCapacity},
	{errdefs.ErrNotImplemented, false, http.StatusNotImplemented, CodeNotImplemented},
	{errdefs.ErrUnavailable, false, http.StatusServiceUnavailable, CodeUnavailable},
	{errdefs.ErrCanceled, false, http.StatusServiceUnavailable, CodeUnavailable},
	{errdefs.ErrDeadlineExceeded, false, http.StatusServiceUnavailable, CodeUnavailable},
	{errdefs.ErrInternal, false, http.StatusInternalServerError, CodeInternal},
}

// ErrorFrom maps err to the API's error model, through the one error table
// every front uses: an *Error in err's chain is answered as it is; an
// errdefs category or reason gets its status and code; fs.ErrNotExist is
// 404 not_found, the context package's errors 503 unavailable; anything
// else 500 internal. The message is err's text, the details those attached
// with errdefs.WithDetails. ErrorFrom(nil) is nil.
func ErrorFrom(err error) *Error {
	if err == nil {
		return nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	status, code := http.StatusInternalServerError, CodeInternal
	// The category row of ErrInternal (the table's last) is the answer
	// only when nothing else is: an internal sentinel wrapped with a
	// missing file or joined with a cancellation answers as those did
	// before the internal sentinels had a category.
	if m, ok := lookup(err); ok && (m.byReason || m.category != errdefs.ErrInternal) {
		status, code = m.status, m.code
	} else if errors.Is(err, fs.ErrNotExist) {
		status, code = http.StatusNotFound, CodeNotFound
	} else if c := errdefs.Category(err); c != nil {
		m, _ := lookup(c) // context.Canceled and DeadlineExceeded
		status, code = m.status, m.code
	}
	return &Error{Status: status, Code: code, Message: err.Error(), Details: maps.Clone(errdefs.Details(err))}
}

// HasCode reports whether err, or an error it wraps, is an *Error with
// the stable code (one of the Code* constants): what a client tests for
// an answer it handles, e.g. HasCode(err, CodeNotFound) after a delete.
func HasCode(err error, code string) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Code == code
}

// lookup returns the first row of errorTable that err matches.
func lookup(err error) (mapping, bool) {
	for _, m := range errorTable {
		if m.byReason && !errdefs.HasReason(err, m.code) {
			continue
		}
		if errors.Is(err, m.category) {
			return m, true
		}
	}
	return mapping{}, false
}

// StatusOf returns the HTTP status a stable error code is answered with
// (its first row in the error table; see the Code* constants), 500 for an
// unknown code. The client uses it to fill Error.Status for errors that
// arrive inside a stream, where no HTTP status travels: there a 422
// invalid_argument reads as the 400 one.
func StatusOf(code string) int {
	if m, ok := rowOf(code, 0); ok {
		return m.status
	}
	return http.StatusInternalServerError
}

// categoryOf returns the errdefs category a stable code answered with an
// HTTP status stands for: the category of its row in errorTable (the
// first with both code and status; with status 0, or one no row of the
// code has, the code's first), errdefs.ErrInternal for an unknown code.
func categoryOf(code string, status int) error {
	if m, ok := rowOf(code, status); ok {
		return m.category
	}
	return errdefs.ErrInternal
}

// rowOf returns the first row of errorTable with code and, unless status
// is 0 or no row of code has it, status.
func rowOf(code string, status int) (mapping, bool) {
	first, found := mapping{}, false
	for _, m := range errorTable {
		if m.code != code {
			continue
		}
		if status == 0 || m.status == status {
			return m, true
		}
		if !found {
			first, found = m, true
		}
	}
	return first, found
}
