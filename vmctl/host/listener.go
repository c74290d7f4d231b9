package host

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Listener is a net.Listener with no address in the file system: each
// DialContext makes a connected unix socket pair (socketpair(2)), hands
// one end to Accept and returns the other. Only this process can reach
// it; being unix sockets, its connections name their peer by uid like
// the daemon's socket does (SO_PEERCRED), so the API server serves it as
// it serves its socket, without a token.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

var _ net.Listener = (*Listener)(nil)

// NewListener returns an open Listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// addr is a Listener's address: network "unix" (the API server serves it
// like its socket, without a token), no path.
var addr = &net.UnixAddr{Name: "in-process", Net: "unix"}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener; dials fail afterwards.
func (l *Listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener: network "unix", name "in-process".
func (l *Listener) Addr() net.Addr { return addr }

// DialContext connects to the listener (an http.Transport's DialContext;
// network and address are ignored). It waits for Accept, until ctx ends
// or the listener closes (an error wrapping net.ErrClosed).
func (l *Listener) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("in-process service: socketpair: %w", err)
	}
	server, err := fdConn(fds[0], "in-process-server")
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	cl, err := fdConn(fds[1], "in-process-client")
	if err != nil {
		server.Close()
		return nil, err
	}
	select {
	case l.conns <- server:
		return cl, nil
	case <-l.done:
		err = fmt.Errorf("in-process service: %w", net.ErrClosed)
	case <-ctx.Done():
		err = ctx.Err()
	}
	server.Close()
	cl.Close()
	return nil, err
}

// fdConn wraps a socket file descriptor in a net.Conn (taking it over).
func fdConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("in-process service: %w", err)
	}
	return c, nil
}
