package domain

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrInvalidSpec is wrapped by every error [Spec.Validate] returns, so
// callers can classify it as an invalid-argument error with errors.Is.
var ErrInvalidSpec = errdefs.New(errdefs.ErrInvalidArgument, "", "invalid domain spec")

var (
	nameRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`)
	uuidRE    = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)
	portRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	machineRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,63}$`)
)

// maxIDLen is the longest accepted SandboxID or Image, in bytes.
const maxIDLen = 128

// fieldError is one problem with one field of a Spec.
type fieldError struct {
	field string
	msg   string
}

// Error implements the error interface.
func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// Unwrap returns the wrapped error, for errors.Is and errors.As.
func (e *fieldError) Unwrap() error { return ErrInvalidSpec }

// Validate reports every problem with s at once, as errors joined with
// errors.Join; each one names the field and says what to fix, and each
// wraps [ErrInvalidSpec]. It returns nil when s can be turned into XML.
func (s Spec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &fieldError{field: field, msg: fmt.Sprintf(format, args...)})
	}

	switch {
	case s.Name == "":
		bad("Name", "is empty; set a domain name such as agentbox-<sandbox id>")
	case !nameRE.MatchString(s.Name):
		bad("Name", "%q is not a valid domain name; use 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit", s.Name)
	}
	if s.UUID != "" && !uuidRE.MatchString(s.UUID) {
		bad("UUID", "%q is not a UUID; use the 8-4-4-4-12 hex form or leave it empty to let libvirt choose", s.UUID)
	}
	if s.SandboxID == "" {
		bad("SandboxID", "is empty; set the id of the sandbox that owns the domain")
	} else if msg := checkLabel(s.SandboxID); msg != "" {
		bad("SandboxID", "%q %s", s.SandboxID, msg)
	}
	if s.Image != "" {
		if msg := checkLabel(s.Image); msg != "" {
			bad("Image", "%q %s", s.Image, msg)
		}
	}
	if s.Owner != "" {
		if msg := checkLabel(s.Owner); msg != "" {
			bad("Owner", "%q %s", s.Owner, msg)
		}
	}

	switch s.Type {
	case TypeKVM, TypeQEMU:
	case "":
		bad("Type", "is empty; use %q (hardware acceleration) or %q (TCG emulation)", TypeKVM, TypeQEMU)
	default:
		bad("Type", "%q is not supported; use %q or %q", s.Type, TypeKVM, TypeQEMU)
	}
	if s.Machine != "" && !machineRE.MatchString(s.Machine) {
		bad("Machine", "%q is not a QEMU machine type name; leave it empty for %q", s.Machine, DefaultMachine)
	}
	if s.VCPUs == 0 || s.VCPUs > MaxVCPUs {
		bad("VCPUs", "%d is out of range; use 1 to %d", s.VCPUs, MaxVCPUs)
	}
	if s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB {
		bad("MemoryMiB", "%d MiB is out of range; use %d to %d MiB", s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB)
	}

	checkPath := func(field, p string, required bool) {
		if p == "" {
			if required {
				bad(field, "is empty; set an absolute path")
			}
			return
		}
		if msg := checkAbsPath(p); msg != "" {
			bad(field, "%q %s", p, msg)
		}
	}
	checkPath("Kernel", s.Kernel, true)
	checkPath("Initrd", s.Initrd, false)
	checkPath("Disk", s.Disk, true)
	checkPath("DiskBacking", s.DiskBacking, false)
	checkPath("ConsoleLog", s.ConsoleLog, true)
	checkPath("AgentSocket", s.AgentSocket, true)
	checkPath("GuestAgentSocket", s.GuestAgentSocket, false)
	for _, sock := range []struct{ field, path string }{
		{"AgentSocket", s.AgentSocket},
		{"GuestAgentSocket", s.GuestAgentSocket},
	} {
		if len(sock.path) > MaxUnixSocketPath {
			bad(sock.field, "is %d bytes long; a unix socket path must be at most %d bytes, use a shorter directory", len(sock.path), MaxUnixSocketPath)
		}
	}
	if s.AgentSocket != "" && s.AgentSocket == s.GuestAgentSocket {
		bad("GuestAgentSocket", "is the same path as AgentSocket; use a different path")
	}

	switch {
	case s.AgentPort == "":
		bad("AgentPort", "is empty; set the virtio-serial port name, e.g. org.agentbox.agent.0")
	case !portRE.MatchString(s.AgentPort):
		bad("AgentPort", "%q is not a valid port name; use letters, digits, '_', '.' or '-'", s.AgentPort)
	case s.AgentPort == GuestAgentPort:
		bad("AgentPort", "%q is reserved for QEMU's guest agent; choose another name", s.AgentPort)
	}

	if strings.IndexFunc(s.Cmdline, unicode.IsControl) >= 0 {
		bad("Cmdline", "contains control characters (newline, tab, ...); use a single line separated by spaces")
	}

	errs = append(errs, s.Tune.validate(s)...)
	errs = append(errs, s.Interface.validate()...)
	errs = append(errs, s.MemoryBackend.validate()...)
	errs = append(errs, s.QEMUUser.validate()...)
	return errors.Join(errs...)
}

// checkAbsPath returns why p is not an acceptable host path, or "".
func checkAbsPath(p string) string {
	switch {
	case !filepath.IsAbs(p):
		return "is not absolute; use an absolute path"
	case filepath.Clean(p) != p:
		return "is not clean; remove '..', '.', doubled or trailing slashes"
	case strings.IndexFunc(p, unicode.IsControl) >= 0:
		return "contains control characters"
	}
	return ""
}

// checkLabel returns why v is not an acceptable metadata value, or "".
func checkLabel(v string) string {
	switch {
	case len(v) > maxIDLen:
		return fmt.Sprintf("is longer than %d bytes", maxIDLen)
	case strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) >= 0:
		return "contains spaces or non-printable characters"
	}
	return ""
}
