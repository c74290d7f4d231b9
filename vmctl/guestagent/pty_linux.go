package guestagent

import (
	"fmt"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// defaultTerm is the TERM of a command on a terminal whose request does not
// set one: what xterm, tmux, iTerm2 and the VS Code terminal all emulate.
const defaultTerm = "xterm-256color"

// openPty allocates a pseudo-terminal of the given size and returns its
// master (non-blocking and registered with Go's poller, so the drain after
// exit can use read deadlines) and its slave (the command's stdin, stdout,
// stderr and controlling terminal).
func openPty(size agentproto.TtySize) (master, slave *os.File, err error) {
	m, sl, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	// pty.Open's ioctls call m.Fd(), which leaves the master in blocking
	// mode where deadlines do nothing: take a non-blocking duplicate.
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err != nil {
		sl.Close()
		return nil, nil, fmt.Errorf("duplicate the pseudo-terminal master: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		sl.Close()
		return nil, nil, fmt.Errorf("pseudo-terminal master: %w", err)
	}
	master = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := setWinsize(master, size); err != nil {
		master.Close()
		sl.Close()
		return nil, nil, err
	}
	return master, sl, nil
}

// setWinsize sets the window size of the terminal whose master is f
// (TIOCSWINSZ); the kernel sends SIGWINCH to its foreground process group
// when the size changes.
func setWinsize(f *os.File, size agentproto.TtySize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("set the terminal size: %w", err)
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Rows, Col: size.Cols})
	}); err != nil {
		return fmt.Errorf("set the terminal size: %w", err)
	}
	if ierr != nil {
		return fmt.Errorf("set the terminal size: %w", ierr)
	}
	return nil
}
