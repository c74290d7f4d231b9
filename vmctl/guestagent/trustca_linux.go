package guestagent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// TrustCA makes the guest under root ("" or "/": the real one) trust the
// CA certificate pemText (validated by agentproto.TrustCARequest): it is
// written to agentproto.TrustCAFile (Debian's update-ca-certificates
// picks it up again whenever the bundle is rebuilt) and appended to
// agentproto.TrustCABundle, the bundle OpenSSL, GnuTLS and their users
// read on Debian and NixOS, unless the bundle holds it already (a
// restarted sandbox asks again). A bundle that is a symbolic link into a
// read-only store (NixOS) is replaced by a file with its content and the
// certificate. Both files are mode 0644, written atomically.
func TrustCA(root, pemText string) error {
	if root == "" {
		root = "/"
	}
	cert := []byte(pemText)
	if !bytes.HasSuffix(cert, []byte("\n")) {
		cert = append(cert, '\n')
	}
	own := filepath.Join(root, agentproto.TrustCAFile)
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		return fmt.Errorf("trust CA: %w", err)
	}
	if err := replaceFile(own, cert); err != nil {
		return fmt.Errorf("trust CA: write %s: %w", agentproto.TrustCAFile, err)
	}
	bundle := filepath.Join(root, agentproto.TrustCABundle)
	old, err := os.ReadFile(bundle) // follows a symbolic link
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("trust CA: read %s: %w", agentproto.TrustCABundle, err)
	}
	if bytes.Contains(old, bytes.TrimSpace(cert)) {
		return nil
	}
	if len(old) > 0 && !bytes.HasSuffix(old, []byte("\n")) {
		old = append(old, '\n')
	}
	if err := os.MkdirAll(filepath.Dir(bundle), 0o755); err != nil {
		return fmt.Errorf("trust CA: %w", err)
	}
	if err := replaceFile(bundle, append(old, cert...)); err != nil {
		return fmt.Errorf("trust CA: write %s: %w", agentproto.TrustCABundle, err)
	}
	return nil
}

// trustCA serves OpTrustCA under Options.TrustRoot.
func (s *server) trustCA(fw *agentproto.Writer, req *agentproto.TrustCARequest) error {
	if err := TrustCA(s.opts.TrustRoot, req.PEM); err != nil {
		return err
	}
	s.log.Info("CA certificate trusted", "file", agentproto.TrustCAFile, "bundle", agentproto.TrustCABundle)
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}
