package host

import (
	"net"
	"slices"
	"strconv"
)

// reservedPorts are the TCP ports of serve's own listeners (the API's
// ListenTCP, the E2B front's Listen), which no port forward may take
// (daemon.Config.ReservedPorts); port 0 (a free one) is none.
func reservedPorts(o Options) []int {
	var out []int
	addrs := []string{o.ListenTCP}
	if o.E2B != nil {
		addrs = append(addrs, o.E2B.Listen)
	}
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if n, err := strconv.Atoi(p); err == nil && n > 0 && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}
