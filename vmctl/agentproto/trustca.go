package agentproto

import (
	"crypto/x509"
	"encoding/pem"
)

// MaxTrustCABytes bounds TrustCARequest.PEM (16 KiB: one certificate).
const MaxTrustCABytes = 16 << 10

// Where the guest agent installs the certificate of OpTrustCA, relative to
// the guest's root: Debian's update-ca-certificates source directory (its
// own file) and the bundle Debian's and NixOS's TLS stacks read (OpenSSL,
// GnuTLS, Python's ssl, curl), to which it is appended.
const (
	TrustCAFile   = "/usr/local/share/ca-certificates/agentbox.crt"
	TrustCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// TrustCARequest is the request of OpTrustCA: the certificate of a
// sandbox's own certificate authority (the host's egress proxy signs the
// certificates of the hosts a secret is bound to with it; its key never
// leaves the host).
type TrustCARequest struct {
	// PEM is exactly one "CERTIFICATE" PEM block of a CA certificate
	// (IsCA), at most MaxTrustCABytes.
	PEM string `json:"pem"`
}

// Validate checks that PEM holds one CA certificate. Errors are *Error
// with CodeInvalid.
func (r *TrustCARequest) Validate() error {
	if len(r.PEM) == 0 || len(r.PEM) > MaxTrustCABytes {
		return invalidf("trust-ca: %d bytes of PEM: want 1 to %d", len(r.PEM), MaxTrustCABytes)
	}
	b, rest := pem.Decode([]byte(r.PEM))
	if b == nil || b.Type != "CERTIFICATE" {
		return invalidf("trust-ca: want one PEM block of type CERTIFICATE")
	}
	if more, _ := pem.Decode(rest); more != nil {
		return invalidf("trust-ca: want exactly one certificate, got more")
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return invalidf("trust-ca: %v", err)
	}
	if !c.IsCA {
		return invalidf("trust-ca: the certificate %q is not a CA certificate", c.Subject.String())
	}
	return nil
}
