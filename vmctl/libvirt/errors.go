package libvirt

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Error categories. Every error returned by this package that falls into
// one of them wraps the sentinel (test with errors.Is); the original
// go-libvirt error stays in the chain too (errors.As with golibvirt.Error).
// ErrUnavailable and ErrClosed are of errdefs.ErrUnavailable; the domain
// errors (ErrDomainNotFound, ErrExists, ErrNotRunning, ErrAgentUnavailable)
// are of errdefs.ErrInternal: they describe the domain, not an object of
// the API (vmctl/sandbox turns the ones a caller can act on into its own),
// and one that reaches a front is agentbox's failure, answered 500
// internal as it always was (not found, conflict or unavailable would
// tell the caller about an object it never named).
var (
	// ErrDomainNotFound: no domain with that name exists (libvirt
	// VIR_ERR_NO_DOMAIN). Transient domains vanish when they stop.
	ErrDomainNotFound = errdefs.New(errdefs.ErrInternal, "", "domain not found")
	// ErrExists: a domain with that name or UUID already exists (libvirt
	// VIR_ERR_DOM_EXIST, or VIR_ERR_OPERATION_FAILED "already exists").
	ErrExists = errdefs.New(errdefs.ErrInternal, "", "domain already exists")
	// ErrUnavailable: libvirtd cannot be reached right now (not running,
	// restarting, connection lost mid-call) or the Conn is closed. Calls
	// that fail with it may be retried later.
	ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, "", "libvirt unavailable")
	// ErrClosed is wrapped, together with ErrUnavailable, by calls made
	// after [Conn.Close].
	ErrClosed = errdefs.New(errdefs.ErrUnavailable, "", "libvirt connection closed")
	// ErrNotRunning: the operation needs a running domain (libvirt
	// VIR_ERR_OPERATION_INVALID, e.g. "domain is not running").
	ErrNotRunning = errdefs.New(errdefs.ErrInternal, "", "domain not running")
	// ErrAgentUnavailable: QEMU's guest agent did not answer (libvirt
	// VIR_ERR_AGENT_UNRESPONSIVE or VIR_ERR_AGENT_UNSYNCED), typically
	// because qemu-ga is not running in the guest or the timeout expired.
	ErrAgentUnavailable = errdefs.New(errdefs.ErrInternal, "", "guest agent unavailable")
)

// QMPError is an error reply from QEMU, either from the QMP monitor
// ({"error":{"class":...,"desc":...}}, see the QMP specification in
// QEMU's docs/interop/qmp-spec) or from qemu-ga, which uses the same shape.
type QMPError struct {
	// Class is the QMP error class, e.g. "CommandNotFound",
	// "GenericError", "DeviceNotFound".
	Class string `json:"class"`
	// Desc is QEMU's human-readable description.
	Desc string `json:"desc"`
}

// Error implements error.
func (e *QMPError) Error() string {
	return fmt.Sprintf("qemu error %s: %s", e.Class, e.Desc)
}

// QMPErrorClass returns Class; it marks the error as QEMU's own reply for
// vmctl/qmp (qmp.ReplyError), as opposed to a transport failure.
func (e *QMPError) QMPErrorClass() string { return e.Class }

// isDisconnect reports whether err means the connection to libvirtd went
// away (as opposed to libvirtd answering with an error).
func isDisconnect(err error) bool {
	if err == nil {
		return false
	}
	var opErr *net.OpError
	return errors.Is(err, golibvirt.ErrInterrupted) ||
		errors.Is(err, syscall.EINVAL) || // go-libvirt's socket: "already disconnected"
		errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, io.EOF) ||
		errors.Is(err, net.ErrClosed) ||
		errors.As(err, &opErr)
}

// mapErr wraps err with the sentinel of its category, keeping err itself
// in the chain. what describes the operation ("destroy domain x").
func mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var lerr golibvirt.Error
	if errors.As(err, &lerr) {
		switch golibvirt.ErrorNumber(lerr.Code) {
		case golibvirt.ErrNoDomain:
			return fmt.Errorf("%s: %w: %w", what, ErrDomainNotFound, err)
		case golibvirt.ErrDomExist:
			return fmt.Errorf("%s: %w: %w", what, ErrExists, err)
		case golibvirt.ErrOperationFailed:
			if containsFold(lerr.Message, "already exists") {
				return fmt.Errorf("%s: %w: %w", what, ErrExists, err)
			}
		case golibvirt.ErrOperationInvalid:
			if containsFold(lerr.Message, "not running") {
				return fmt.Errorf("%s: %w: %w", what, ErrNotRunning, err)
			}
		case golibvirt.ErrAgentUnresponsive, golibvirt.ErrAgentUnsynced, golibvirt.ErrAgentCommandTimeout:
			return fmt.Errorf("%s: %w: %w", what, ErrAgentUnavailable, err)
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	if isDisconnect(err) {
		return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}
