package guestagent

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// nicWait bounds how long ConfigureNetwork waits for the NIC to appear
// (virtio_net still probing).
const nicWait = 10 * time.Second

// ConfigureNetwork configures the guest's NIC as req says, through
// netlink: the interface whose MAC is req.MAC (else the first one that is
// not loopback) is brought up with req.Address as its only IPv4 address,
// the default route goes via req.Gateway, /etc/resolv.conf gets the one
// line "nameserver DNS" and /etc/hosts maps host.agentbox.internal to DNS
// (the host side of the sandbox's subnet, where host:PORT rules are
// served). The gateway's MAC address is learnt once and pinned as a
// permanent neighbour entry (pinGateway); when that alone fails the error
// wraps ErrGatewayUnpinned and the rest is configured. Files are replaced atomically (a symbolic link in their place,
// as NixOS has, is replaced by a file). The guest agent calls it at boot
// for agentbox.net= on the kernel command line and for OpConfigureNetwork;
// it needs CAP_NET_ADMIN and a writable /etc.
func ConfigureNetwork(req agentproto.NetworkRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	addr := netip.MustParsePrefix(req.Address)
	link, err := findNIC(req.MAC)
	if err != nil {
		return err
	}
	name := link.Attrs().Name
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	old, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return fmt.Errorf("list addresses of %s: %w", name, err)
	}
	want := &net.IPNet{IP: net.IP(addr.Addr().AsSlice()), Mask: net.CIDRMask(addr.Bits(), 32)}
	have := false
	for _, a := range old {
		if a.IPNet.String() == want.String() {
			have = true
			continue
		}
		if err := netlink.AddrDel(link, &a); err != nil {
			return fmt.Errorf("remove address %s from %s: %w", a.IPNet, name, err)
		}
	}
	if !have {
		if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: want}); err != nil {
			return fmt.Errorf("add address %s to %s: %w", req.Address, name, err)
		}
	}
	if req.Gateway != "" {
		gw := net.ParseIP(req.Gateway)
		route := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: gw}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("default route via %s on %s: %w", req.Gateway, name, err)
		}
	}
	var pinErr error
	if req.Gateway != "" {
		if err := pinGateway(link, addr.Addr(), netip.MustParseAddr(req.Gateway)); err != nil {
			pinErr = fmt.Errorf("%w on %s: %w", ErrGatewayUnpinned, name, err)
		}
	}
	if req.DNS != "" {
		if err := replaceFile("/etc/resolv.conf", []byte("nameserver "+req.DNS+"\n")); err != nil {
			return fmt.Errorf("write /etc/resolv.conf: %w", err)
		}
		if err := setHostsEntry("/etc/hosts", netpolicy.HostAlias, req.DNS); err != nil {
			return fmt.Errorf("write /etc/hosts: %w", err)
		}
	}
	return pinErr
}

// findNIC returns the link with MAC mac, or without mac the first one that
// is not loopback, waiting up to nicWait for it to appear.
func findNIC(mac string) (netlink.Link, error) {
	deadline := time.Now().Add(nicWait)
	for {
		links, err := netlink.LinkList()
		if err != nil {
			return nil, fmt.Errorf("list interfaces: %w", err)
		}
		for _, l := range links {
			a := l.Attrs()
			if a.Flags&net.FlagLoopback != 0 {
				continue
			}
			if mac == "" || strings.EqualFold(a.HardwareAddr.String(), mac) {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			if mac == "" {
				return nil, errors.New("no network interface besides lo")
			}
			return nil, fmt.Errorf("no network interface with MAC %s", mac)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// setHostsEntry makes name map to addr in the hosts file p: lines naming
// it are dropped, "addr\tname" is appended; other lines stay.
func setHostsEntry(p, name, addr string) error {
	old, err := os.ReadFile(p)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out bytes.Buffer
	for _, line := range strings.SplitAfter(string(old), "\n") {
		fields := strings.Fields(strings.SplitN(line, "#", 2)[0])
		drop := false
		for _, f := range fields[min(1, len(fields)):] {
			drop = drop || f == name
		}
		if !drop && line != "" {
			out.WriteString(line)
			if !strings.HasSuffix(line, "\n") {
				out.WriteString("\n")
			}
		}
	}
	out.WriteString(addr + "\t" + name + "\n")
	return replaceFile(p, out.Bytes())
}

// replaceFile writes content to p atomically (temporary file in the same
// directory, fsync, rename), mode 0644; a symbolic link at p is replaced.
func replaceFile(p string, content []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// configureNetwork serves OpConfigureNetwork with Options.ConfigureNetwork.
func (s *server) configureNetwork(fw *agentproto.Writer, req *agentproto.NetworkRequest) error {
	if s.opts.ConfigureNetwork == nil {
		return &agentproto.Error{Code: agentproto.CodeUnsupported, Message: "network configuration is not enabled in this agent (it runs only as the guest's init)"}
	}
	if err := s.opts.ConfigureNetwork(*req); errors.Is(err, ErrGatewayUnpinned) {
		s.log.Warn("network configured; its gateway resolves by ARP", "err", err)
	} else if err != nil {
		return fmt.Errorf("configure network: %w", err)
	}
	s.log.Info("network configured", "address", req.Address, "gateway", req.Gateway, "mac", req.MAC)
	return fw.WriteJSON(agentproto.FrameResponse, agentproto.Empty{})
}
