package testenv

import (
	"net"
	"os"
	"syscall"
	"testing"
)

// SocketPair returns the two ends of a connected unix stream socket pair,
// which buffers like QEMU's chardev socket of a virtio-serial port (unlike
// net.Pipe): tests serve an in-process guest agent on one end and dial it
// from the other.
func SocketPair(t testing.TB) (host, guest net.Conn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int, name string) net.Conn {
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return conn(fds[0], "host"), conn(fds[1], "guest")
}
