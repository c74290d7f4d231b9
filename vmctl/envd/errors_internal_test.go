package envd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestConnectError: the API's answers (as vmctl/client returns them) and
// the service's own errors map to the Connect codes E2B's SDK turns into
// its errors, with the API's message.
func TestConnectError(t *testing.T) {
	cases := []struct {
		err  error
		code connect.Code
	}{
		{api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox x"), connect.CodeNotFound},
		{api.Errorf(http.StatusBadRequest, api.CodeInvalidArgument, "bad"), connect.CodeInvalidArgument},
		{api.Errorf(http.StatusConflict, api.CodeStdinClosed, "closed"), connect.CodeFailedPrecondition},
		{api.Errorf(http.StatusConflict, api.CodeNotRunning, "paused"), connect.CodeUnavailable},
		{api.Errorf(http.StatusTooManyRequests, api.CodeExecLimit, "limit"), connect.CodeResourceExhausted},
		{api.Errorf(http.StatusServiceUnavailable, api.CodeGuestDied, "died"), connect.CodeUnavailable},
		{api.Errorf(http.StatusUnauthorized, api.CodeUnauthorized, "token"), connect.CodeUnauthenticated},
		{api.Errorf(http.StatusInternalServerError, "some_future_code", "?"), connect.CodeInternal},
		{fmt.Errorf("wrapped: %w", errdefs.ErrPermissionDenied), connect.CodePermissionDenied},
		{fmt.Errorf("waiting: %w", context.DeadlineExceeded), connect.CodeDeadlineExceeded},
		{context.Canceled, connect.CodeCanceled},
		{errors.New("plain"), connect.CodeInternal},
	}
	for _, tc := range cases {
		got := connectError(tc.err)
		var ce *connect.Error
		if !errors.As(got, &ce) || ce.Code() != tc.code || ce.Message() != tc.err.Error() {
			t.Errorf("%v: got %v, want %v with the same message", tc.err, got, tc.code)
		}
	}
	ce := connect.NewError(connect.CodeAborted, errors.New("x"))
	if got := connectError(ce); got != ce {
		t.Errorf("a Connect error changed: %v", got)
	}
	if connectError(nil) != nil {
		t.Error("nil became an error")
	}
}
