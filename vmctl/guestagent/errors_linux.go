package guestagent

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// toProtoError maps an error of a guest operation to its protocol form.
// *agentproto.Error values pass through; others are categorised by their
// errno (through fs sentinels), keeping err's text as the message.
func toProtoError(err error) *agentproto.Error {
	var pe *agentproto.Error
	if errors.As(err, &pe) {
		return pe
	}
	code := agentproto.CodeIO
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		code = agentproto.CodeNotFound
	case errors.Is(err, fs.ErrExist):
		code = agentproto.CodeExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		code = agentproto.CodePermission
	case errors.As(err, &errno) && (errno == syscall.EISDIR || errno == syscall.EINVAL ||
		errno == syscall.ENAMETOOLONG || errno == syscall.ELOOP ||
		errno == syscall.EXDEV):
		code = agentproto.CodeInvalid
	}
	return &agentproto.Error{Code: code, Message: err.Error()}
}
