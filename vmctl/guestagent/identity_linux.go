package guestagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// identity gives a guest restored from a snapshot its own identity: the
// kernel hostname (the kernel command line's agentbox.hostname was read
// at boot of the snapshot's source, not again), /etc/hostname and
// /etc/machine-id where they exist (replaced atomically; an image without
// machine-id keeps none).
func (s *server) identity(fw *agentproto.Writer, req *agentproto.IdentityRequest) error {
	sethostname, etcDir := s.opts.SetHostname, s.opts.EtcDir
	if sethostname == nil {
		sethostname = func(name string) error { return unix.Sethostname([]byte(name)) }
	}
	if etcDir == "" {
		etcDir = "/etc"
	}
	if err := sethostname(req.Hostname); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	var resp agentproto.IdentityResponse
	var err error
	if resp.HostnameFileWritten, err = replaceIfExists(filepath.Join(etcDir, "hostname"), req.Hostname+"\n"); err != nil {
		return err
	}
	if req.MachineID != "" {
		if resp.MachineIDWritten, err = replaceIfExists(filepath.Join(etcDir, "machine-id"), req.MachineID+"\n"); err != nil {
			return err
		}
	}
	s.log.Info("identity set", "hostname", req.Hostname, "machine_id", resp.MachineIDWritten)
	return fw.WriteJSON(agentproto.FrameResponse, resp)
}

// replaceIfExists replaces the regular file p with content (same mode,
// via a temporary file and rename) and reports whether it existed. A
// symbolic link is followed to its target.
func replaceIfExists(p, content string) (bool, error) {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, nil
	}
	tmp := p + ".agentbox-tmp"
	if err := os.WriteFile(tmp, []byte(content), fi.Mode().Perm()); err != nil {
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("replace %s: %w", p, err)
	}
	return true, nil
}
