package network

import (
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// tapGroup is the interface group (IFLA_GROUP) of the taps of table: a
// hash of its name with the top bit set (never the default group 0). The
// table's catch-all rules match it.
func tapGroup(table string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(table))
	return h.Sum32() | 1<<31
}

// tapAlias is the interface alias (IFLA_IFALIAS) of a tap made for table:
// "agentbox:TABLE". Sweep only touches taps carrying its own table's alias.
func tapAlias(table string) string { return "agentbox:" + table }

// createTap makes the persistent tap name (root-owned, one queue, no packet
// information header, virtio-net headers: what libvirt opens for a virtio
// NIC with managed='no'), gives it the alias and the MAC address
// TapMACFor(its sandbox's id) (the guest pins it as its gateway's: a tap
// made again keeps it), disables IPv6 on it, sets the host address
// host/bits and brings it up. The tap has no carrier until
// QEMU opens it. On error nothing is left.
func createTap(name, alias string, group uint32, host netip.Addr, bits int) (err error) {
	tap := &netlink.Tuntap{
		LinkAttrs: netlink.LinkAttrs{Name: name},
		Mode:      netlink.TUNTAP_MODE_TAP,
		Flags:     netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE,
	}
	if err := netlink.LinkAdd(tap); err != nil {
		return fmt.Errorf("create tap %s (needs CAP_NET_ADMIN and /dev/net/tun): %w", name, err)
	}
	defer func() {
		if err != nil {
			deleteTap(name)
		}
	}()
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	// The group first: from here on the table's catch-all rules hold the
	// tap closed until its own rules let its traffic through.
	if err := netlink.LinkSetGroup(link, int(group)); err != nil {
		return fmt.Errorf("tap %s: set group: %w", name, err)
	}
	if err := netlink.LinkSetAlias(link, alias); err != nil {
		return fmt.Errorf("tap %s: set alias: %w", name, err)
	}
	mac, err := TapMACFor(strings.TrimPrefix(name, TapPrefix))
	if err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
		return fmt.Errorf("tap %s: set MAC address %s: %w", name, mac, err)
	}
	// No IPv6 on the host side: no link-local address the guest could
	// reach. Best effort (a hardened service may not write /proc/sys, a
	// kernel may lack IPv6): the firewall drops IPv6 from the tap anyway.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1"), 0)
	addr := &netlink.Addr{IPNet: prefixIPNet(netip.PrefixFrom(host, bits))}
	if err := netlink.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("tap %s: add address %s/%d: %w", name, host, bits, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap %s: set up: %w", name, err)
	}
	return nil
}

// deleteTap removes the tap; a missing one is not an error.
func deleteTap(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("find tap %s: %w", name, err)
	}
	// ENODEV: a concurrent teardown (the domain's stop event and the
	// remove that caused it) got there first.
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete tap %s: %w", name, err)
	}
	return nil
}

// tapExists reports whether an interface called name exists.
func tapExists(name string) bool {
	_, err := netlink.LinkByName(name)
	return err == nil
}

// listTaps returns the names of the interfaces whose name starts with
// TapPrefix and whose alias is alias.
func listTaps(alias string) ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if strings.HasPrefix(a.Name, TapPrefix) && a.Alias == alias {
			out = append(out, a.Name)
		}
	}
	return out, nil
}

// hostPrefixes returns the IPv4 prefixes of every address on the host's
// interfaces (for the pool to skip).
func hostPrefixes() ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list host addresses: %w", err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok {
			continue
		}
		bits, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, bits).Masked())
	}
	return out, nil
}

// prefixIPNet converts p (address with its prefix length) to a *net.IPNet
// keeping the address unmasked, as netlink.Addr wants it.
func prefixIPNet(p netip.Prefix) *net.IPNet {
	a := p.Addr().As4()
	return &net.IPNet{IP: net.IP(a[:]), Mask: net.CIDRMask(p.Bits(), 32)}
}
