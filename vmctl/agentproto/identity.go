package agentproto

import "regexp"

// IdentityRequest is the request of OpIdentity: what makes a guest
// restored from a snapshot distinct from its source and its siblings.
type IdentityRequest struct {
	// Hostname is the new hostname (sethostname(2) and /etc/hostname if
	// the guest has that file); 1..64 bytes of letters, digits, '-' and
	// '.', starting with a letter or digit (RFC 1123). Required.
	Hostname string `json:"hostname"`
	// MachineID, if set, replaces the content of /etc/machine-id when the
	// guest has that file (machine-id(5): 32 lowercase hex digits). A
	// guest without the file is left without one.
	MachineID string `json:"machine_id,omitempty"`
}

// IdentityResponse is the FrameResponse of OpIdentity.
type IdentityResponse struct {
	// MachineIDWritten says whether /etc/machine-id existed and was
	// replaced.
	MachineIDWritten bool `json:"machine_id_written"`
	// HostnameFileWritten says whether /etc/hostname existed and was
	// replaced.
	HostnameFileWritten bool `json:"hostname_file_written"`
}

var (
	hostnameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$`)
	machineIDRE = regexp.MustCompile(`^[0-9a-f]{32}$`)
)

// Validate checks the request's shape. Errors are *Error with
// CodeInvalid.
func (r *IdentityRequest) Validate() error {
	if !hostnameRE.MatchString(r.Hostname) {
		return invalidf("identity: hostname %q: want 1..64 letters, digits, '-' or '.', starting with a letter or digit", r.Hostname)
	}
	if r.MachineID != "" && !machineIDRE.MatchString(r.MachineID) {
		return invalidf("identity: machine id %q: want 32 lowercase hex digits", r.MachineID)
	}
	return nil
}
