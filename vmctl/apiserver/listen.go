package apiserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// DefaultSocketMode is the unix socket's permission when ListenUnix gets
// mode 0: owner and group may connect.
const DefaultSocketMode fs.FileMode = 0o660

// ListenUnix listens on the unix socket path for Serve. It creates the
// parent directory (0755) if missing; removes a stale socket file (one
// that nobody accepts on) but fails when another daemon answers there or
// when path is not a socket; then sets the socket's mode (0 means
// DefaultSocketMode) and, when gid >= 0, its group. The socket file is
// removed when the listener is closed.
func ListenUnix(path string, mode fs.FileMode, gid int) (net.Listener, error) {
	if mode == 0 {
		mode = DefaultSocketMode
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket's directory: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, mode.Perm()); err != nil {
		l.Close()
		return nil, fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Lchown(path, -1, gid); err != nil {
			l.Close()
			return nil, fmt.Errorf("giving %s to group %d: %w", path, gid, err)
		}
	}
	return l, nil
}

// removeStaleSocket removes path if it is a socket nobody accepts on.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket: remove it or pass --socket", path)
	}
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("another agentbox serve is listening on %s: stop it or pass --socket", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("checking whether a daemon listens on %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
}

// ActivationListeners returns the listening sockets systemd passed to the
// process (socket activation: LISTEN_FDS), nil when there are none. It
// unsets the LISTEN_* variables so children do not inherit them. A
// passed descriptor that is not a listening stream socket is an error.
func ActivationListeners() ([]net.Listener, error) {
	ls, err := activation.Listeners()
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	for i, l := range ls {
		if l == nil {
			for _, o := range ls {
				if o != nil {
					o.Close()
				}
			}
			return nil, fmt.Errorf("socket activation: passed descriptor %d is not a listening stream socket: use ListenStream= in the .socket unit", 3+i)
		}
	}
	if len(ls) == 0 {
		return nil, nil
	}
	return ls, nil
}
