package api

import (
	"net/netip"
	"strconv"
	"time"
)

// PortForwardRequest is the body of POST /v1/sandboxes/{id}/ports: carry
// the TCP connections of a host listener to a port on the guest's
// loopback, over the guest agent's channel (no guest network device is
// needed or used).
type PortForwardRequest struct {
	// GuestPort is the guest's TCP port, 1–65535. Connections go to
	// 127.0.0.1:GuestPort in the guest ([::1] when that refuses).
	GuestPort int `json:"guest_port"`
	// HostAddr is where the daemon listens: "IP:PORT" with an IP literal
	// of the daemon's host; port 0 takes a free one. Empty means
	// "127.0.0.1:0" (loopback, a free port).
	HostAddr string `json:"host_addr,omitempty"`
}

// DefaultPortHostAddr is a forward's host address when the request gives
// none: loopback, a free port.
const DefaultPortHostAddr = "127.0.0.1:0"

// Validate checks the guest port's range and the host address's syntax
// (400 invalid_argument).
func (r *PortForwardRequest) Validate() error {
	if err := CheckPort(strconv.Itoa(r.GuestPort)); err != nil {
		return err
	}
	if r.HostAddr != "" {
		if _, err := netip.ParseAddrPort(r.HostAddr); err != nil {
			return Invalidf("host_addr %s: want IP:PORT with an IP address of the daemon's host, e.g. 127.0.0.1:8080, [::1]:8080 or 0.0.0.0:8080 (port 0: a free one)", QuoteShort(r.HostAddr))
		}
	}
	return nil
}

// CheckPort checks a guest port from a URL ({port}) or a request: a
// decimal TCP port, 1–65535. Errors are 400 invalid_argument.
func CheckPort(port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
		return Invalidf("guest port %s is not a TCP port: give a number from 1 to 65535", QuoteShort(port))
	}
	return nil
}

// PortForward is the API's view of one port forward of a sandbox
// (GET /v1/sandboxes/{id}/ports, the sandbox's "ports").
type PortForward struct {
	// GuestPort is the guest's TCP port the connections go to.
	GuestPort int `json:"guest_port"`
	// HostAddr is the host listener's address, e.g. "127.0.0.1:41234".
	HostAddr string `json:"host_addr"`
	// CreatedAt is when the forward was opened.
	CreatedAt time.Time `json:"created_at"`
	// Open says whether the host listener is open. A forward a restarted
	// daemon could not listen on again (its address was taken meanwhile)
	// is kept, closed, with Error saying why: remove it and forward again.
	Open bool `json:"open"`
	// Error is why the listener is not open, "" when it is.
	Error string `json:"error,omitempty"`
	// Connections counts the connections accepted since the daemon (re)opened
	// the listener; Active those open now; Failed those that failed
	// (nothing listened on the guest port, a side reset).
	Connections int64 `json:"connections"`
	Active      int64 `json:"active"`
	Failed      int64 `json:"failed"`
	// BytesIn and BytesOut are the bytes carried to the guest and back
	// since the daemon (re)opened the listener.
	BytesIn  int64 `json:"bytes_in"`
	BytesOut int64 `json:"bytes_out"`
	// LastError is the failure of the last failed connection, e.g.
	// "connect to guest port 8000: connection refused: …".
	LastError string `json:"last_error,omitempty"`
}

// PortForwardList is the body of GET /v1/sandboxes/{id}/ports.
type PortForwardList struct {
	// Ports are ordered by guest port.
	Ports []PortForward `json:"ports"`
}
