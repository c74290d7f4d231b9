package network

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// TapPrefix starts the name of every tap this package creates; the
// firewall's catch-all rules match it.
const TapPrefix = "abx"

var idRE = regexp.MustCompile(`^[0-9a-f]{12}$`)

// TapName returns the tap device name of sandbox id (12 lowercase hex
// digits): TapPrefix + id, 15 bytes, the longest interface name Linux takes.
// Errors: an id of another shape.
func TapName(id string) (string, error) {
	if !idRE.MatchString(id) {
		return "", fmt.Errorf("sandbox id %q: want 12 lowercase hex digits", id)
	}
	return TapPrefix + id, nil
}

// MACFor returns the guest NIC's MAC address for sandbox id: a locally
// administered unicast address (first octet 0x02, IEEE 802 "U/L" bit set)
// followed by 0xab and the first 8 hex digits of the id, e.g.
// 02:ab:12:34:56:78. Errors: as TapName.
func MACFor(id string) (string, error) {
	if !idRE.MatchString(id) {
		return "", fmt.Errorf("sandbox id %q: want 12 lowercase hex digits", id)
	}
	b, _ := hex.DecodeString(id[:8])
	return net.HardwareAddr{0x02, 0xab, b[0], b[1], b[2], b[3]}.String(), nil
}

// Attachment is a sandbox's link to the host: what the domain, the guest
// and the firewall need to know. It is kept in the sandbox's record so a
// restarted daemon can adopt it.
type Attachment struct {
	// Tap is the host tap device (see TapName).
	Tap string `json:"tap"`
	// MAC is the guest NIC's MAC address (see MACFor), "02:ab:xx:xx:xx:xx".
	MAC string `json:"mac"`
	// Host (H) is the host side of the sandbox's /30, set on the tap: the
	// guest's gateway, resolver and egress proxy.
	Host netip.Addr `json:"host"`
	// Guest (G) is the guest's address in the same /30.
	Guest netip.Addr `json:"guest"`
	// Bits is the prefix length of the sandbox's subnet (30).
	Bits int `json:"bits"`
}

// Subnet returns the sandbox's subnet (H and G's /30).
func (a Attachment) Subnet() netip.Prefix {
	p, _ := a.Host.Prefix(a.Bits)
	return p
}

// Cmdline returns the kernel command line word the guest agent reads to
// configure its NIC: agentbox.net=G/BITS,gw=H,dns=H,mac=MAC (see
// ParseGuestConfig).
func (a Attachment) Cmdline() string {
	return "agentbox.net=" + a.GuestConfig().String()
}

// GuestConfig returns what the guest configures: its address, gateway,
// resolver and the MAC of the NIC to configure.
func (a Attachment) GuestConfig() GuestConfig {
	return GuestConfig{Address: netip.PrefixFrom(a.Guest, a.Bits), Gateway: a.Host, DNS: a.Host, MAC: a.MAC}
}

// GuestConfig is the network configuration of a guest NIC, as the kernel
// command line word agentbox.net= carries it and as the guest agent's
// configure-network operation takes it.
type GuestConfig struct {
	// Address is the guest's address and prefix length, e.g. 10.213.0.2/30.
	Address netip.Prefix
	// Gateway is the default route's next hop (H).
	Gateway netip.Addr
	// DNS is the only nameserver written to /etc/resolv.conf (H).
	DNS netip.Addr
	// MAC selects the NIC; empty means the first interface that is not lo.
	MAC string
}

// String returns the agentbox.net= value: "10.213.0.2/30,gw=10.213.0.1,dns=10.213.0.1,mac=02:ab:…".
func (c GuestConfig) String() string {
	var b strings.Builder
	b.WriteString(c.Address.String())
	if c.Gateway.IsValid() {
		b.WriteString(",gw=" + c.Gateway.String())
	}
	if c.DNS.IsValid() {
		b.WriteString(",dns=" + c.DNS.String())
	}
	if c.MAC != "" {
		b.WriteString(",mac=" + c.MAC)
	}
	return b.String()
}

// ParseGuestConfig parses the value of agentbox.net= (see
// GuestConfig.String). The address is required (IPv4 with a prefix length);
// gw, dns and mac are optional. Errors name the bad part.
func ParseGuestConfig(s string) (GuestConfig, error) {
	var c GuestConfig
	parts := strings.Split(s, ",")
	addr, err := netip.ParsePrefix(parts[0])
	if err != nil || !addr.Addr().Is4() {
		return c, fmt.Errorf("agentbox.net=%s: address %q: want IPv4/BITS, e.g. 10.213.0.2/30", s, parts[0])
	}
	c.Address = addr
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "gw", "dns":
			a, err := netip.ParseAddr(v)
			if err != nil || !a.Is4() {
				return c, fmt.Errorf("agentbox.net=%s: %s=%q: want an IPv4 address", s, k, v)
			}
			if k == "gw" {
				c.Gateway = a
			} else {
				c.DNS = a
			}
		case "mac":
			if _, err := net.ParseMAC(v); err != nil {
				return c, fmt.Errorf("agentbox.net=%s: mac=%q: %w", s, v, err)
			}
			c.MAC = strings.ToLower(v)
		default:
			return c, fmt.Errorf("agentbox.net=%s: unknown key %q (known: gw, dns, mac)", s, k)
		}
	}
	return c, nil
}

// portsString joins ports for logs.
func portsString(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
