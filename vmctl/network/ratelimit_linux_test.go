package network

import (
	"fmt"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestLimitTap: an htb root qdisc with class 1:1 at the rate and burst
// on a real tap, and nothing on its ingress (the traffic from the guest is
// capped by the firewall: outlimit_linux_test.go).
func TestLimitTap(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "vmctl/network tests need root (taps, traffic control)")
	}
	name := fmt.Sprintf("abxrl%d", os.Getpid()%100000)
	tap := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name}, Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI}
	if err := netlink.LinkAdd(tap); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netlink.LinkDel(tap) })
	link, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	lim, err := LimitTap(name, 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	if lim.Burst != 209715 {
		t.Errorf("burst %d, want a tenth of a second (209715)", lim.Burst)
	}
	classes, err := netlink.ClassList(link, netlink.MakeHandle(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, c := range classes {
		if h, ok := c.(*netlink.HtbClass); ok && h.Handle == netlink.MakeHandle(1, 1) {
			found = true
			if h.Rate != 2<<20 || h.Ceil != 2<<20 {
				t.Errorf("htb class 1:1 rate %d ceil %d bytes/s, want 2 MiB/s", h.Rate, h.Ceil)
			}
		}
	}
	if !found {
		t.Fatalf("no htb class 1:1 on %s: %v", name, classes)
	}
	qdiscs, _ := netlink.QdiscList(link)
	for _, q := range qdiscs {
		if q.Type() == "ingress" {
			t.Errorf("an ingress qdisc on %s: %v", name, q)
		}
	}
	if _, err := LimitTap(name, 1000); err == nil {
		t.Error("a cap below the minimum was accepted")
	}
	if _, err := LimitTap("abxnosuchtap", 2<<20); err == nil {
		t.Error("a missing tap was accepted")
	}
}
