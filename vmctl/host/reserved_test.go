package host

import (
	"fmt"
	"testing"
)

// TestReservedPorts: the ports of serve's own TCP listeners are handed to
// the daemon, each once, a free port (0) or no listener none.
func TestReservedPorts(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, "[]"},
		{Options{ListenTCP: "127.0.0.1:7070"}, "[7070]"},
		{Options{ListenTCP: "[::]:7070", E2B: &E2BOptions{Listen: "0.0.0.0:3000"}}, "[7070 3000]"},
		{Options{ListenTCP: "127.0.0.1:7070", E2B: &E2BOptions{Listen: "127.0.0.1:7070"}}, "[7070]"},
		{Options{ListenTCP: "127.0.0.1:0", E2B: &E2BOptions{Listen: "bad"}}, "[]"},
	} {
		if got := fmt.Sprint(reservedPorts(tc.o)); got != tc.want {
			t.Errorf("reservedPorts(%q, %+v) = %s, want %s", tc.o.ListenTCP, tc.o.E2B, got, tc.want)
		}
	}
}
