package guestagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrGatewayUnpinned is wrapped by ConfigureNetwork's error when
// everything was configured but the gateway's MAC address could not be
// learnt and pinned (pinGateway): the guest then resolves its gateway
// with ordinary ARP, as before pinning existed. Callers log it and go on
// (it never reaches a front; its category is ErrUnavailable).
var ErrGatewayUnpinned = errdefs.New(errdefs.ErrUnavailable, "", "gateway neighbour entry not pinned")

// gatewayWait bounds pinGateway's ARP exchange; arpRetry is the interval
// between its requests.
const (
	gatewayWait = 3 * time.Second
	arpRetry    = 200 * time.Millisecond
)

// pinGateway learns gw's MAC address on link with an ARP request from src
// (RFC 826, over an AF_PACKET socket: no IP packet leaves) and makes it a
// permanent neighbour entry (NUD_PERMANENT, `ip neigh replace GW lladdr
// MAC nud permanent`), after removing the permanent IPv4 entries an
// earlier configuration left on link (a restored guest's old gateway).
//
// Why: a guest that fills its own transmit queue (a port scan, a flood of
// connects) can lose the ARP probes that keep a dynamic entry alive; the
// entry then fails and every connect through the gateway gets
// EHOSTUNREACH for minutes (seen in TestIsolationFromGuest). The sandbox's
// link is point to point to one host tap whose MAC is fixed for the
// sandbox's life (vmctl/network's TapMACFor), so nothing needs ARP after
// this. Errors: the socket's, the exchange timing out after gatewayWait,
// netlink's.
func pinGateway(link netlink.Link, src, gw netip.Addr) error {
	idx := link.Attrs().Index
	old, err := netlink.NeighList(idx, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list neighbours: %w", err)
	}
	for _, n := range old {
		if n.State&netlink.NUD_PERMANENT != 0 && !n.IP.Equal(net.IP(gw.AsSlice())) {
			if err := netlink.NeighDel(&n); err != nil {
				return fmt.Errorf("remove stale neighbour %s: %w", n.IP, err)
			}
		}
	}
	mac, err := arpResolve(idx, link.Attrs().HardwareAddr, src, gw)
	if err != nil {
		return err
	}
	return netlink.NeighSet(&netlink.Neigh{
		LinkIndex: idx, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IP(gw.AsSlice()), HardwareAddr: mac,
	})
}

// arpResolve sends ARP requests for target from (ownMAC, src) on interface
// idx every arpRetry and returns the sender hardware address of the first
// reply from target, within gatewayWait.
func arpResolve(idx int, ownMAC net.HardwareAddr, src, target netip.Addr) (net.HardwareAddr, error) {
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return nil, fmt.Errorf("ARP socket: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: idx}); err != nil {
		return nil, fmt.Errorf("ARP socket: bind: %w", err)
	}
	tv := unix.NsecToTimeval(arpRetry.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return nil, fmt.Errorf("ARP socket: %w", err)
	}
	req := arpRequest(ownMAC, src, target)
	bcast := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: idx, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	buf := make([]byte, 128)
	deadline := time.Now().Add(gatewayWait)
	for time.Now().Before(deadline) {
		if err := unix.Sendto(fd, req, 0, bcast); err != nil {
			return nil, fmt.Errorf("send ARP request for %s: %w", target, err)
		}
		for next := time.Now().Add(arpRetry); time.Now().Before(next); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("read ARP reply: %w", err)
			}
			if mac, ok := arpReplyFrom(buf[:n], target); ok {
				return mac, nil
			}
		}
	}
	return nil, fmt.Errorf("no ARP reply from %s within %s", target, gatewayWait)
}

// arpRequest is an Ethernet/IPv4 ARP request (RFC 826: hardware type 1,
// protocol 0x0800, op 1) asking who has target, from (mac, src).
func arpRequest(mac net.HardwareAddr, src, target netip.Addr) []byte {
	b := make([]byte, 28)
	binary.BigEndian.PutUint16(b[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(b[2:], 0x0800) // IPv4
	b[4], b[5] = 6, 4
	binary.BigEndian.PutUint16(b[6:], 1) // request
	copy(b[8:14], mac)
	s4, t4 := src.As4(), target.As4()
	copy(b[14:18], s4[:])
	// b[18:24], the target hardware address, stays zero.
	copy(b[24:28], t4[:])
	return b
}

// arpReplyFrom returns the sender hardware address of p when p is an
// Ethernet/IPv4 ARP reply (op 2) whose sender protocol address is from.
func arpReplyFrom(p []byte, from netip.Addr) (net.HardwareAddr, bool) {
	if len(p) < 28 || binary.BigEndian.Uint16(p[0:]) != 1 || binary.BigEndian.Uint16(p[2:]) != 0x0800 ||
		p[4] != 6 || p[5] != 4 || binary.BigEndian.Uint16(p[6:]) != 2 {
		return nil, false
	}
	if netip.AddrFrom4([4]byte(p[14:18])) != from {
		return nil, false
	}
	return net.HardwareAddr(append([]byte(nil), p[8:14]...)), true
}

// htons converts a 16-bit value to network byte order, as AF_PACKET's
// protocol fields take it.
func htons(v uint16) uint16 { return v<<8 | v>>8 }
