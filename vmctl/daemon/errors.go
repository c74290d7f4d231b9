package daemon

import (
	"context"
	"errors"
	"io/fs"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/process"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// toAPI maps an error of the layers below to the API's error model, in
// this one place (containerd's errdefs idea): sandbox, process, guest
// agent and libvirt categories become an HTTP status and a stable code.
// An *api.Error passes through; anything unknown is 500 internal.
func toAPI(err error) *api.Error {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae
	}
	if se := snapshotError(err); se != nil {
		return se
	}
	status, code := http.StatusInternalServerError, api.CodeInternal
	var ge *agentproto.Error
	switch {
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, process.ErrNotFound):
		status, code = http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, sandbox.ErrNameTaken):
		status, code = http.StatusConflict, api.CodeNameTaken
	case errors.Is(err, sandbox.ErrRunning):
		status, code = http.StatusConflict, api.CodeSandboxRunning
	case errors.Is(err, sandbox.ErrGuestDied):
		status, code = http.StatusServiceUnavailable, api.CodeGuestDied
	case errors.Is(err, sandbox.ErrNotRunning):
		status, code = http.StatusConflict, api.CodeNotRunning
	case errors.Is(err, sandbox.ErrConflict):
		status, code = http.StatusConflict, api.CodeConflict
	case errors.Is(err, sandbox.ErrBootTimeout):
		status, code = http.StatusInternalServerError, api.CodeBootFailed
	case errors.Is(err, sandbox.ErrInvalid):
		status, code = http.StatusBadRequest, api.CodeInvalidArgument
	case errors.Is(err, process.ErrExited):
		status, code = http.StatusConflict, api.CodeProcessExited
	case errors.Is(err, process.ErrStdinClosed):
		status, code = http.StatusConflict, api.CodeStdinClosed
	case errors.Is(err, process.ErrDropped):
		status, code = http.StatusGone, api.CodeOutputDropped
	case errors.Is(err, process.ErrTooMany):
		status, code = http.StatusTooManyRequests, api.CodeExecLimit
	case errors.Is(err, libvirt.ErrUnavailable), errors.Is(err, libvirt.ErrClosed):
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
	case errors.As(err, &ge):
		switch ge.Code {
		case agentproto.CodeNotFound:
			status, code = http.StatusNotFound, api.CodeNotFound
		case agentproto.CodeExists:
			status, code = http.StatusConflict, api.CodeFileExists
		case agentproto.CodePermission:
			status, code = http.StatusForbidden, api.CodePermissionDenied
		case agentproto.CodeInvalid:
			status, code = http.StatusUnprocessableEntity, api.CodeInvalidArgument
		default:
			status, code = http.StatusInternalServerError, api.CodeGuestError
		}
	case errors.Is(err, fs.ErrNotExist):
		status, code = http.StatusNotFound, api.CodeNotFound
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, code = http.StatusServiceUnavailable, api.CodeUnavailable
	}
	return &api.Error{Status: status, Code: code, Message: err.Error()}
}
