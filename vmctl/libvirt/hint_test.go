package libvirt

import (
	"errors"
	"fmt"
	"testing"
)

// TestConnectError: the URI and the hint around the error, which stays
// in the chain.
func TestConnectError(t *testing.T) {
	err := ConnectError("qemu:///system", fmt.Errorf("dial: %w", ErrUnavailable))
	want := "connect to libvirt at qemu:///system: dial: " + ErrUnavailable.Error() +
		" (is libvirtd running? start it with `libvirtd -d` or `systemctl start libvirtd`)"
	if err.Error() != want || !errors.Is(err, ErrUnavailable) {
		t.Errorf("ConnectError = %q, want %q wrapping ErrUnavailable", err, want)
	}
}
