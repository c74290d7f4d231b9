package envd

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// connectCodes is THE map from the sandbox service's error categories to
// the Connect codes of the data plane's answers, from which E2B's SDK
// makes its errors (NotFoundError from not_found, InvalidArgumentError
// from invalid_argument, TimeoutError from deadline_exceeded and
// unavailable, AuthenticationError from unauthenticated, RateLimitError
// from resource_exhausted). An *api.Error the client returned unwraps to
// the category of its code (api.Error.Unwrap), so the API's codes map
// through the same rows: 409 stdin_closed and process_exited are
// failed_precondition, 503 guest_died unavailable. One code is taken
// before the rows: sandbox_not_running (the sandbox was paused, stopped or
// removed under a call) is unavailable, from which the SDK raises
// TimeoutError, as E2B's proxy answers for a sandbox that is gone.
// The first matching row wins.
var connectCodes = []struct {
	category *errdefs.Error
	code     connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition},
	{errdefs.ErrConflict, connect.CodeFailedPrecondition},
	{errdefs.ErrAlreadyExists, connect.CodeAlreadyExists},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied},
	{errdefs.ErrUnauthenticated, connect.CodeUnauthenticated},
	{errdefs.ErrResourceExhausted, connect.CodeResourceExhausted},
	{errdefs.ErrNotImplemented, connect.CodeUnimplemented},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrCanceled, connect.CodeCanceled},
	{errdefs.ErrDeadlineExceeded, connect.CodeDeadlineExceeded},
	{errdefs.ErrInternal, connect.CodeInternal},
}

// connectError returns err as the data plane answers it: a
// *connect.Error as it is; the context's own errors as canceled and
// deadline_exceeded; anything else through api.ErrorFrom (the one error
// table) and connectCodes, with the API's message. nil stays nil.
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	}
	ae := api.ErrorFrom(err)
	if ae.Code == api.CodeNotRunning {
		return connect.NewError(connect.CodeUnavailable, errors.New(ae.Message))
	}
	code := connect.CodeInternal
	for _, m := range connectCodes {
		if errors.Is(ae, m.category) {
			code = m.code
			break
		}
	}
	return connect.NewError(code, errors.New(ae.Message))
}

// errorf returns a Connect error with code and the formatted message, for
// what the data plane itself refuses.
func errorf(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}
