package daemon

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// The daemon's own refusals, as errdefs sentinels (the layers below
// declare theirs). The daemon returns errors of the layers below as they
// are; the HTTP layer answers them through api.ErrorFrom.
var (
	// errCapacity: admission control refused a create or restore.
	errCapacity = errdefs.New(errdefs.ErrResourceExhausted, api.CodeCapacity, "host capacity exceeded")
	// errNotAFile: a download of a directory or special file.
	errNotAFile = errdefs.New(errdefs.ErrFailedPrecondition, api.CodeNotAFile, "not a regular file")
	// errNotADirectory: a list of a non-directory.
	errNotADirectory = errdefs.New(errdefs.ErrFailedPrecondition, api.CodeNotADirectory, "not a directory")
)

// auditError returns the stable code and message an audit entry records
// for err: those of its API answer.
func auditError(err error) (code, message string) {
	ae := api.ErrorFrom(err)
	return ae.Code, ae.Message
}
