package network

import (
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/vmctl/agentproto"
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

// TapMACFor returns the MAC address of sandbox id's host tap: 02:aa
// followed by the first 8 hex digits of the id (locally administered
// unicast, like MACFor's 02:ab for the guest's NIC). It is fixed for the
// sandbox's life, also when the tap is made again (Adopt), because the
// guest pins it as its gateway's (vmctl/guestagent). Errors: as TapName.
func TapMACFor(id string) (net.HardwareAddr, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("sandbox id %q: want 12 lowercase hex digits", id)
	}
	b, _ := hex.DecodeString(id[:8])
	return net.HardwareAddr{0x02, 0xaa, b[0], b[1], b[2], b[3]}, nil
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
	// OutLimit is the cap on the guest's traffic in the sandbox's
	// firewall rules; nil without one.
	OutLimit *OutLimit `json:"out_limit,omitempty"`
}

// Subnet returns the sandbox's subnet (H and G's /30).
func (a Attachment) Subnet() netip.Prefix {
	p, _ := a.Host.Prefix(a.Bits)
	return p
}

// Cmdline returns the kernel command line word the guest agent reads to
// configure its NIC: agentbox.net=G/BITS,gw=H,dns=H,mac=MAC (see
// agentproto.ParseNetworkConfig).
func (a Attachment) Cmdline() string {
	return "agentbox.net=" + a.GuestConfig().String()
}

// GuestConfig returns what the guest configures: its address, gateway,
// resolver and the MAC of the NIC (also the request of the agent's
// configure-network operation).
func (a Attachment) GuestConfig() agentproto.NetworkRequest {
	return agentproto.NetworkRequest{
		Address: netip.PrefixFrom(a.Guest, a.Bits).String(),
		Gateway: a.Host.String(), DNS: a.Host.String(), MAC: a.MAC,
	}
}

// portsString joins ports for logs.
func portsString(ports []uint16) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}
