package guestagent

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/agentbox/agentbox/tests/testenv"
)

func TestARPEncoding(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0xab, 1, 2, 3, 4}
	src, gw := netip.MustParseAddr("10.213.0.2"), netip.MustParseAddr("10.213.0.1")
	req := arpRequest(mac, src, gw)
	want := []byte{0, 1, 8, 0, 6, 4, 0, 1, 0x02, 0xab, 1, 2, 3, 4, 10, 213, 0, 2, 0, 0, 0, 0, 0, 0, 10, 213, 0, 1}
	if !bytes.Equal(req, want) {
		t.Fatalf("request % x, want % x", req, want)
	}
	// A reply swaps the roles and sets op 2.
	reply := append([]byte(nil), want...)
	reply[7] = 2
	copy(reply[8:], []byte{0x02, 0xaa, 9, 8, 7, 6, 10, 213, 0, 1, 0x02, 0xab, 1, 2, 3, 4, 10, 213, 0, 2})
	if got, ok := arpReplyFrom(reply, gw); !ok || got.String() != "02:aa:09:08:07:06" {
		t.Errorf("reply: %v %v", got, ok)
	}
	for name, p := range map[string][]byte{"a request": want, "short": reply[:27], "another sender": func() []byte {
		b := append([]byte(nil), reply...)
		b[17] = 9
		return b
	}()} {
		if _, ok := arpReplyFrom(p, gw); ok {
			t.Errorf("%s taken as the gateway's reply", name)
		}
	}
}

// TestPinGateway runs pinGateway in a network namespace of its own whose
// veth peer, in another, is the "host": the gateway's MAC is learnt and
// pinned, an earlier configuration's permanent entries go, and a gateway
// that does not answer is an error after gatewayWait.
func TestPinGateway(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "pinGateway needs root (network namespaces, AF_PACKET)")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	defer netns.Set(orig)
	nsH, err := netns.New()
	if err != nil {
		t.Fatal(err)
	}
	defer nsH.Close()
	nsG, err := netns.New() // the thread is in it from here on
	if err != nil {
		t.Fatal(err)
	}
	defer nsG.Close()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	must("veth", netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "g0"}, PeerName: "h0", PeerNamespace: netlink.NsFd(nsH)}))
	hH, err := netlink.NewHandleAt(nsH)
	must("handle", err)
	defer hH.Close()
	h0, err := hH.LinkByName("h0")
	must("h0", err)
	hostMAC := net.HardwareAddr{0x02, 0xaa, 1, 2, 3, 4}
	must("h0 mac", hH.LinkSetHardwareAddr(h0, hostMAC))
	must("h0 addr", hH.AddrAdd(h0, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 99, 0, 1), Mask: net.CIDRMask(30, 32)}}))
	must("h0 up", hH.LinkSetUp(h0))
	g0, err := netlink.LinkByName("g0")
	must("g0", err)
	must("g0 addr", netlink.AddrAdd(g0, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 99, 0, 2), Mask: net.CIDRMask(30, 32)}}))
	must("g0 up", netlink.LinkSetUp(g0))
	g0, err = netlink.LinkByName("g0") // with its MAC
	must("g0", err)
	// What an earlier configuration left: its gateway, pinned.
	must("stale", netlink.NeighAdd(&netlink.Neigh{LinkIndex: g0.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
		IP: net.IPv4(10, 98, 0, 1), HardwareAddr: net.HardwareAddr{0x02, 0xaa, 9, 9, 9, 9}}))

	gw := netip.MustParseAddr("10.99.0.1")
	must("pin", pinGateway(g0, netip.MustParseAddr("10.99.0.2"), gw))
	ns, err := netlink.NeighList(g0.Attrs().Index, netlink.FAMILY_V4)
	must("neighbours", err)
	var got []string
	for _, n := range ns {
		got = append(got, n.IP.String()+" "+n.HardwareAddr.String()+" "+neighState(n.State))
	}
	if strings.Join(got, ";") != "10.99.0.1 02:aa:01:02:03:04 permanent" {
		t.Errorf("neighbours %q, want only the gateway, pinned", got)
	}

	// Nobody has 10.99.0.3: no reply, an error naming it.
	if err := pinGateway(g0, netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("10.99.0.3")); err == nil || !strings.Contains(err.Error(), "no ARP reply from 10.99.0.3") {
		t.Errorf("a silent gateway: %v", err)
	}
}

func neighState(s int) string {
	if s&netlink.NUD_PERMANENT != 0 {
		return "permanent"
	}
	return fmt.Sprintf("state %#x", s)
}
