package apiserver

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sync"
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
// when path is not a socket; then it binds the socket in a private
// directory beside path (mode 0700, bindDir), sets the socket's mode (0
// means DefaultSocketMode) and, when gid >= 0, its group there, and only
// then links it to path and removes the private directory: path never
// names a socket whose mode is not yet set, so no other uid can connect
// in between (the process-wide umask would be racy in a multi-threaded
// program). The link fails, as a bind would, when path appeared in the
// meantime. Errors leave neither path nor the private directory behind.
// The socket file is removed when the listener is closed.
func ListenUnix(path string, mode fs.FileMode, gid int) (_ net.Listener, err error) {
	if mode == 0 {
		mode = DefaultSocketMode
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the socket's directory: %w", err)
	}
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("the socket path %s is %d bytes long, at most %d: pass a shorter --socket", path, len(path), maxSocketPath)
	}
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	private, err := os.MkdirTemp(dir, bindDir) // mode 0700
	if err != nil {
		return nil, fmt.Errorf("creating a private directory to bind %s in: %w", path, err)
	}
	defer os.RemoveAll(private) // empty once linked; the socket's name there on errors
	bound := filepath.Join(private, "s")
	if len(bound) > maxSocketPath {
		return nil, fmt.Errorf("the socket path %s is too long: binding it takes %d bytes in %s, at most %d: pass a shorter --socket", path, len(bound), private, maxSocketPath)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: bound, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false) // its name moves to path: unixListener.Close removes that
	defer func() {
		if err != nil {
			ul.Close()
		}
	}()
	if err := os.Chmod(bound, mode.Perm()); err != nil {
		return nil, fmt.Errorf("setting the mode of %s: %w", path, err)
	}
	if gid >= 0 {
		if err := os.Lchown(bound, -1, gid); err != nil {
			return nil, fmt.Errorf("giving %s to group %d: %w", path, gid, err)
		}
	}
	if beforePublish != nil {
		beforePublish(bound)
	}
	if err := os.Link(bound, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%s appeared while binding (another agentbox serve starting?): stop it or pass --socket", path)
		}
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	return &unixListener{UnixListener: ul, addr: &net.UnixAddr{Name: path, Net: "unix"}}, nil
}

// bindDir is the name pattern (os.MkdirTemp) of the private directory
// ListenUnix binds its socket in, beside the socket's path.
const bindDir = ".agentbox-bind-"

// maxSocketPath is the longest path a unix socket can be bound to on
// Linux (sun_path is 108 bytes with the terminating NUL).
const maxSocketPath = 107

// beforePublish, when set (tests), is called by ListenUnix with the
// private path of the bound socket after its mode and group are set and
// before it gets its real path.
var beforePublish func(bound string)

// unixListener is ListenUnix's listener: its socket was bound under a
// private name and linked to addr's path, which Close removes (once).
type unixListener struct {
	*net.UnixListener
	addr *net.UnixAddr
	once sync.Once
}

// Addr returns the socket's path (network "unix"), not its private
// name while binding.
func (l *unixListener) Addr() net.Addr { return l.addr }

// Close closes the socket and removes its path.
func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() {
		if rerr := os.Remove(l.addr.Name); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
			err = rerr
		}
	})
	return err
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
