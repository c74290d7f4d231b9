package network

import (
	"net/netip"
	"testing"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

func TestNamesAndCmdline(t *testing.T) {
	tap, err := TapName("0123456789ab")
	if err != nil || tap != "abx0123456789ab" || len(tap) > 15 {
		t.Fatalf("TapName = %q, %v", tap, err)
	}
	mac, err := MACFor("0123456789ab")
	if err != nil || mac != "02:ab:01:23:45:67" {
		t.Fatalf("MACFor = %q, %v", mac, err)
	}
	for _, bad := range []string{"", "0123456789AB", "0123456789abc", "../x"} {
		if _, err := TapName(bad); err == nil {
			t.Errorf("TapName(%q) accepted", bad)
		}
	}
	a := Attachment{Tap: tap, MAC: mac, Host: netip.MustParseAddr("10.213.0.1"), Guest: netip.MustParseAddr("10.213.0.2"), Bits: 30}
	if got, want := a.Cmdline(), "agentbox.net=10.213.0.2/30,gw=10.213.0.1,dns=10.213.0.1,mac=02:ab:01:23:45:67"; got != want {
		t.Fatalf("Cmdline = %q, want %q", got, want)
	}
	r, err := agentproto.ParseNetworkConfig(a.GuestConfig().String())
	if err != nil || r != a.GuestConfig() {
		t.Fatalf("guest parses %+v, %v; want %+v", r, err, a.GuestConfig())
	}
	if a.Subnet() != netip.MustParsePrefix("10.213.0.0/30") {
		t.Fatalf("Subnet = %s", a.Subnet())
	}
}

func TestPool(t *testing.T) {
	p, err := newPool(netip.MustParsePrefix("10.213.0.0/28")) // 4 subnets
	if err != nil {
		t.Fatal(err)
	}
	taken := netip.MustParsePrefix("10.213.0.4/30") // "a host interface has it"
	seen := map[netip.Prefix]bool{}
	for _, id := range []string{"a", "b", "c"} {
		s, err := p.allocate(id, func(s netip.Prefix) bool { return s == taken })
		if err != nil {
			t.Fatal(err)
		}
		if s == taken || seen[s] || !p.prefix.Contains(s.Addr()) || s.Bits() != 30 {
			t.Fatalf("allocated %s (taken %s, seen %v)", s, taken, seen)
		}
		seen[s] = true
	}
	if _, err := p.allocate("d", func(s netip.Prefix) bool { return s == taken }); err == nil {
		t.Fatal("a full pool allocated")
	}
	p.release("b")
	if _, err := p.allocate("d", func(netip.Prefix) bool { return false }); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if h, g := hostSide(taken), guestSide(taken); h.String() != "10.213.0.5" || g.String() != "10.213.0.6" {
		t.Fatalf("sides %s %s", h, g)
	}
	if _, err := newPool(netip.MustParsePrefix("10.0.0.0/31")); err == nil {
		t.Fatal("a /31 pool accepted")
	}
}
