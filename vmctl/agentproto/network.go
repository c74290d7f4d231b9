package agentproto

import (
	"net"
	"net/netip"
	"strings"
)

// NetworkRequest is the request of OpConfigureNetwork and the content of
// the kernel command line word agentbox.net= (see String and
// ParseNetworkConfig): the guest's one NIC, as the host's network layer
// (vmctl/network) assigned it.
type NetworkRequest struct {
	// Address is the guest's IPv4 address with its prefix length, e.g.
	// "10.213.0.2/30". Required.
	Address string `json:"address"`
	// Gateway is the default route's next hop (the host side of the
	// sandbox's subnet), e.g. "10.213.0.1"; empty: no default route.
	Gateway string `json:"gateway,omitempty"`
	// DNS is the only nameserver written to /etc/resolv.conf; it is also
	// what host.agentbox.internal maps to in /etc/hosts. Empty: both are
	// left alone.
	DNS string `json:"dns,omitempty"`
	// MAC selects the NIC ("02:ab:…"); empty means the first interface
	// that is not loopback.
	MAC string `json:"mac,omitempty"`
}

// Validate checks the request's shape. Errors are *Error with
// CodeInvalid.
func (r *NetworkRequest) Validate() error {
	p, err := netip.ParsePrefix(r.Address)
	if err != nil || !p.Addr().Is4() {
		return invalidf("network: address %q: want IPv4/BITS, e.g. 10.213.0.2/30", r.Address)
	}
	for name, v := range map[string]string{"gateway": r.Gateway, "dns": r.DNS} {
		if v == "" {
			continue
		}
		if a, err := netip.ParseAddr(v); err != nil || !a.Is4() {
			return invalidf("network: %s %q: want an IPv4 address", name, v)
		}
	}
	if r.MAC != "" {
		if _, err := net.ParseMAC(r.MAC); err != nil {
			return invalidf("network: mac %q: %v", r.MAC, err)
		}
	}
	return nil
}

// String returns the agentbox.net= value:
// "10.213.0.2/30,gw=10.213.0.1,dns=10.213.0.1,mac=02:ab:01:23:45:67".
func (r NetworkRequest) String() string {
	var b strings.Builder
	b.WriteString(r.Address)
	for _, kv := range [][2]string{{"gw", r.Gateway}, {"dns", r.DNS}, {"mac", r.MAC}} {
		if kv[1] != "" {
			b.WriteString("," + kv[0] + "=" + kv[1])
		}
	}
	return b.String()
}

// ParseNetworkConfig parses the value of agentbox.net= (see String) and
// validates it. Errors are *Error with CodeInvalid naming the bad part.
func ParseNetworkConfig(s string) (NetworkRequest, error) {
	parts := strings.Split(s, ",")
	r := NetworkRequest{Address: parts[0]}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "gw":
			r.Gateway = v
		case "dns":
			r.DNS = v
		case "mac":
			r.MAC = strings.ToLower(v)
		default:
			return r, invalidf("agentbox.net=%s: unknown key %q (known: gw, dns, mac)", s, k)
		}
	}
	return r, r.Validate()
}
