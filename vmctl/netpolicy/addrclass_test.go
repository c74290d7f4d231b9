package netpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestClassify: every range, the edges of each, and each IPv4-embedding
// IPv6 form judged as the IPv4 address it carries.
func TestClassify(t *testing.T) {
	for s, want := range map[string]Class{
		// IPv4 ranges and their edges.
		"0.0.0.0": ClassThisNetwork, "0.255.255.255": ClassThisNetwork, "1.0.0.0": ClassPublic,
		"127.0.0.1": ClassLoopback, "127.255.255.255": ClassLoopback, "126.255.255.255": ClassPublic, "128.0.0.0": ClassPublic,
		"169.254.169.254": ClassLinkLocal, "169.254.0.0": ClassLinkLocal, "169.253.255.255": ClassPublic, "169.255.0.0": ClassPublic,
		"224.0.0.1": ClassMulticast, "239.255.255.255": ClassMulticast, "223.255.255.255": ClassPublic,
		"240.0.0.1": ClassReserved, "255.255.255.255": ClassReserved,
		"100.100.100.200": ClassMetadata, "100.100.100.199": ClassCGNAT, "100.100.100.201": ClassCGNAT,
		"100.64.0.0": ClassCGNAT, "100.127.255.255": ClassCGNAT, "100.63.255.255": ClassPublic, "100.128.0.0": ClassPublic,
		"10.0.0.0": ClassPrivate, "10.255.255.255": ClassPrivate, "11.0.0.0": ClassPublic, "9.255.255.255": ClassPublic,
		"172.16.0.0": ClassPrivate, "172.31.255.255": ClassPrivate, "172.15.255.255": ClassPublic, "172.32.0.0": ClassPublic,
		"192.168.0.0": ClassPrivate, "192.168.255.255": ClassPrivate, "192.167.255.255": ClassPublic, "192.169.0.0": ClassPublic,
		"198.51.100.7": ClassPublic, "8.8.8.8": ClassPublic,
		// IPv6 ranges.
		"::": ClassUnspecified, "::1": ClassLoopback, "fe80::1": ClassLinkLocal, "febf::1": ClassLinkLocal, "fec0::1": ClassPublic,
		"ff02::1": ClassMulticast, "fd00:ec2::254": ClassMetadata, "fd00:ec2::253": ClassULA, "fc00::1": ClassULA,
		"fdff:ffff::1": ClassULA, "fe00::1": ClassPublic, "fbff::1": ClassPublic,
		"64:ff9b:1::1": ClassReserved, "64:ff9b:1:ffff::1": ClassReserved,
		"2001:db8::1": ClassPublic, "2606:4700::1111": ClassPublic,
		// IPv4-mapped (::ffff:0:0/96).
		"::ffff:127.0.0.1": ClassLoopback, "::ffff:169.254.169.254": ClassLinkLocal, "::ffff:10.1.2.3": ClassPrivate,
		"::ffff:100.100.100.200": ClassMetadata, "::ffff:198.51.100.7": ClassPublic,
		// IPv4-compatible (::/96; :: and ::1 are themselves).
		"::127.0.0.1": ClassLoopback, "::169.254.169.254": ClassLinkLocal, "::198.51.100.7": ClassPublic, "::0.0.0.2": ClassThisNetwork,
		// IPv4-translated (::ffff:0:0:0/96).
		"::ffff:0:a9fe:a9fe": ClassLinkLocal, "::ffff:0:c633:6407": ClassPublic,
		// NAT64 (64:ff9b::/96).
		"64:ff9b::a9fe:a9fe": ClassLinkLocal, "64:ff9b::169.254.169.254": ClassLinkLocal, "64:ff9b::7f00:1": ClassLoopback,
		"64:ff9b::6464:64c8": ClassMetadata, "64:ff9b::6440:1": ClassCGNAT, "64:ff9b::a01:203": ClassPrivate,
		"64:ff9b::c0a8:101": ClassPrivate, "64:ff9b::e000:1": ClassMulticast, "64:ff9b::c633:6407": ClassPublic,
		// 6to4 (2002:AABB:CCDD::/48).
		"2002:a9fe:a9fe::1": ClassLinkLocal, "2002:7f00:1::": ClassLoopback, "2002:6464:64c8:1::1": ClassMetadata,
		"2002:a00:1::1": ClassPrivate, "2002:ac10:1::": ClassPrivate, "2002:c633:6407::1": ClassPublic, "2002::1": ClassThisNetwork,
		// Teredo (2001:0::/32; client = the last 32 bits inverted).
		"2001:0:4136:e378:8000:63bf:5601:5601": ClassLinkLocal, // ^0x56015601 = 169.254.169.254
		"2001:0:4136:e378:8000:63bf:80ff:fffe": ClassLoopback,  // 127.0.0.1
		"2001:0:4136:e378:8000:63bf:39cc:9bf8": ClassPublic,    // 198.51.100.7
	} {
		a := netip.MustParseAddr(s)
		if got := Classify(a); got != want {
			t.Errorf("Classify(%s) = %s, want %s", s, got, want)
		}
	}
	if got := Classify(netip.Addr{}); got != ClassUnspecified {
		t.Errorf("Classify(zero) = %s", got)
	}
	if got := Classify(netip.MustParseAddr("fe80::1%eth0")); got != ClassLinkLocal {
		t.Errorf("Classify(fe80::1%%eth0) = %s", got)
	}
}

func TestEmbedded4(t *testing.T) {
	for s, want := range map[string]string{
		"::ffff:1.2.3.4":                       "1.2.3.4",
		"::1.2.3.4":                            "1.2.3.4",
		"::ffff:0:1.2.3.4":                     "1.2.3.4",
		"64:ff9b::102:304":                     "1.2.3.4",
		"2002:102:304:5::6":                    "1.2.3.4",
		"2001:0:4136:e378:8000:63bf:fefd:fcfb": "1.2.3.4",
	} {
		got, ok := Embedded4(netip.MustParseAddr(s))
		if !ok || got != netip.MustParseAddr(want) {
			t.Errorf("Embedded4(%s) = %s, %v; want %s", s, got, ok, want)
		}
	}
	for _, s := range []string{"::", "::1", "1.2.3.4", "2001:db8::1", "64:ff9b:1::102:304", "2003::1", "64:ff9c::102:304", "fc00::1"} {
		a := netip.MustParseAddr(s)
		if got, ok := Embedded4(a); ok || got != a {
			t.Errorf("Embedded4(%s) = %s, %v; want itself, false", s, got, ok)
		}
	}
}

func TestClassesAndPrefixes(t *testing.T) {
	for _, c := range NeverClasses {
		if !c.Never() || c.Inside() {
			t.Errorf("%s: Never %v Inside %v", c, c.Never(), c.Inside())
		}
	}
	for _, c := range InsideClasses {
		if c.Never() || !c.Inside() {
			t.Errorf("%s: Never %v Inside %v", c, c.Never(), c.Inside())
		}
	}
	if ClassPublic.Never() || ClassPublic.Inside() {
		t.Error("public is Never or Inside")
	}
	str := func(ps []netip.Prefix) string {
		var out []string
		for _, p := range ps {
			out = append(out, p.String())
		}
		return strings.Join(out, " ")
	}
	if got, want := str(Prefixes4(NeverClasses...)), "0.0.0.0/8 127.0.0.0/8 169.254.0.0/16 224.0.0.0/4 240.0.0.0/4 100.100.100.200/32"; got != want {
		t.Errorf("Prefixes4(Never) = %s, want %s", got, want)
	}
	if got, want := str(Prefixes4(InsideClasses...)), "100.64.0.0/10 10.0.0.0/8 172.16.0.0/12 192.168.0.0/16"; got != want {
		t.Errorf("Prefixes4(Inside) = %s, want %s", got, want)
	}
	if got := Prefixes4(ClassULA); got != nil {
		t.Errorf("Prefixes4(ULA) = %v: IPv6 has none (the tap drops IPv6)", got)
	}
}

// TestOpenReaches: open mode never reaches Never classes or CGNAT; with
// BlockPrivate, not private, CGNAT or ULA either; embedded forms alike.
func TestOpenReaches(t *testing.T) {
	open := Policy{Mode: ModeOpen}
	tenant := Policy{Mode: ModeOpen, BlockPrivate: true}
	for s, want := range map[string][2]bool{ // {open, tenant}
		"198.51.100.7": {true, true}, "2001:db8::1": {true, true}, "64:ff9b::c633:6407": {true, true},
		"10.1.2.3": {true, false}, "172.20.0.1": {true, false}, "192.168.1.1": {true, false}, "fd12::1": {true, false},
		"64:ff9b::a01:203": {true, false}, "2002:c0a8:101::1": {true, false}, "::ffff:10.1.2.3": {true, false},
		"100.64.0.1": {false, false}, "100.100.100.200": {false, false}, "64:ff9b::6464:64c8": {false, false},
		"169.254.169.254": {false, false}, "64:ff9b::a9fe:a9fe": {false, false}, "2002:a9fe:a9fe::": {false, false},
		"127.0.0.1": {false, false}, "::1": {false, false}, "0.0.0.0": {false, false}, "255.255.255.255": {false, false},
		"fd00:ec2::254": {false, false}, "64:ff9b:1::1": {false, false}, "ff02::1": {false, false},
	} {
		a := netip.MustParseAddr(s)
		if got := [2]bool{open.OpenReaches(a), tenant.OpenReaches(a)}; got != want {
			t.Errorf("OpenReaches(%s) open, tenant = %v, want %v", s, got, want)
		}
	}
}

// TestEmbeddedCIDRRules: an IPv6 CIDR rule is refused for the IPv4
// ranges it carries through NAT64, 6to4, Teredo or mapped forms.
func TestEmbeddedCIDRRules(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"[64:ff9b::a9fe:a9fe]:80", "link-local 169.254.0.0/16 (as NAT64 64:ff9b::/96 carrying 169.254.169.254/32)"},
		{"[64:ff9b::]/96:80", "this-network 0.0.0.0/8 (as NAT64 64:ff9b::/96 carrying 0.0.0.0/0)"},
		{"[64:ff9b::]/64:80", "(as NAT64 64:ff9b::/96 carrying 0.0.0.0/0)"},
		{"[64:ff9b::6464:64c8]:80", "metadata 100.100.100.200/32 (as NAT64"},
		{"[64:ff9b::7f00:0]/104:80", "loopback 127.0.0.0/8 (as NAT64 64:ff9b::/96 carrying 127.0.0.0/8)"},
		{"[2002:a9fe::]/32:443", "link-local 169.254.0.0/16 (as 6to4 2002::/16 carrying 169.254.0.0/16)"},
		{"[2002::]/16:443", "(as 6to4 2002::/16 carrying 0.0.0.0/0)"},
		{"[2001:0:4136:e378:8000:63bf:5601:5601]:80", "link-local 169.254.0.0/16 (as Teredo 2001::/32 carrying 169.254.169.254/32)"},
		{"[::ffff:0:a9fe:a9fe]:80", "link-local 169.254.0.0/16 (as IPv4-translated"},
		{"[::a9fe:a9fe]:80", "link-local 169.254.0.0/16 (as IPv4-compatible"},
		{"[64:ff9b:1::]/48:80", "reserved [64:ff9b:1::]/48"},
		{"[64:ff9b:1:2::1]:80", "reserved [64:ff9b:1::]/48"},
	} {
		_, err := ParseRule(tc.in)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "may never reach") {
			t.Errorf("ParseRule(%q): %v, want ErrInvalid with %q", tc.in, err, tc.msg)
		}
	}
	// Public addresses through the same forms stay valid rules.
	for _, s := range []string{"[64:ff9b::c633:6407]:80", "[64:ff9b::c633:6400]/120:80", "[2002:c633:6407::]/48:443", "[2001:db8::]/32:443"} {
		if _, err := ParseRule(s); err != nil {
			t.Errorf("ParseRule(%q): %v", s, err)
		}
	}
}

func TestPrivateBlocked(t *testing.T) {
	p, err := Parse("allowlist", []string{"example.com", "198.51.100.0/24:80", "host:5432"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := p.WithPrivateBlocked()
	if err != nil || !q.BlockPrivate || p.BlockPrivate || !slices.Equal(q.Strings(), p.Strings()) {
		t.Fatalf("WithPrivateBlocked: %+v, %v", q, err)
	}
	if got, want := q.String(), "allowlist[example.com 198.51.100.0/24:80 host:5432] private=blocked"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := q.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	for _, tc := range []struct{ rule, msg string }{
		{"10.1.0.0/16:5432", "--allow 10.1.0.0/16:5432: the range covers private 10.0.0.0/8, and this sandbox may not reach private, CGNAT or ULA destinations"},
		{"172.31.0.1:22", "covers private 172.16.0.0/12"},
		{"192.168.1.0/24:80", "covers private 192.168.0.0/16"},
		{"100.64.1.0/24:80", "covers cgnat 100.64.0.0/10"},
		{"100.64.0.0/11:80", "covers cgnat 100.64.0.0/10"},
		{"8.0.0.0/6:80", "covers private 10.0.0.0/8"},
		{"[fd12::]/16:443", "covers ula [fc00::]/7"},
		{"[64:ff9b::a00:1]:80", "covers private 10.0.0.0/8 (as NAT64 64:ff9b::/96 carrying 10.0.0.1/32)"},
		{"[2002:c0a8::]/32:80", "covers private 192.168.0.0/16 (as 6to4 2002::/16 carrying 192.168.0.0/16)"},
	} {
		p, err := Parse("allowlist", []string{tc.rule})
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.rule, err)
		}
		if _, err := p.WithPrivateBlocked(); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("WithPrivateBlocked(%s): %v, want ErrInvalid with %q", tc.rule, err, tc.msg)
		}
		p.BlockPrivate = true
		if err := p.Validate(); err == nil {
			t.Errorf("Validate(%s with BlockPrivate): accepted", tc.rule)
		}
	}
	o, err := Policy{Mode: ModeOpen}.WithPrivateBlocked()
	if err != nil || o.String() != "open private=blocked" {
		t.Errorf("open: %q, %v", o, err)
	}
}

func TestDNSMode(t *testing.T) {
	p, err := Parse("allowlist", []string{"example.com", "api.example.org:8443", "198.51.100.0/24:80"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.WithDNS("strict")
	if err != nil || s.DNS != DNSStrict || s.String() != "allowlist[example.com api.example.org:8443 198.51.100.0/24:80] dns=strict" {
		t.Fatalf("WithDNS(strict): %q %+v, %v", s, s, err)
	}
	for _, in := range []string{"", "default"} {
		if d, err := s.WithDNS(in); err != nil || d.DNS != DNSDefault {
			t.Errorf("WithDNS(%q): %+v, %v", in, d, err)
		}
	}
	w, _ := Parse("allowlist", []string{"example.com", "*.example.org"})
	for _, tc := range []struct {
		p        Policy
		dns, msg string
	}{
		{p, "loose", `unknown dns mode "loose"`},
		{w, "strict", "--allow *.example.org: dns strict resolves only names the policy lists, and any name below a wildcard is the guest's choice: list each name (e.g. --allow www.example.org)"},
		{Policy{Mode: ModeOpen}, "strict", "dns strict needs --network allowlist: with open the guest can reach any DNS server itself"},
		{Policy{}, "strict", "dns strict needs --network allowlist: mode none has no network"},
	} {
		if _, err := tc.p.WithDNS(tc.dns); err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s WithDNS(%q): %v, want ErrInvalid with %q", tc.p, tc.dns, err, tc.msg)
		}
	}
	bad := w
	bad.DNS = DNSStrict
	if err := bad.Validate(); err == nil {
		t.Error("Validate of a strict policy with a wildcard: accepted")
	}
}

// TestPolicyOptionsJSON: the options survive a JSON round trip (the
// sandbox record) and are checked when read back.
func TestPolicyOptionsJSON(t *testing.T) {
	p, _ := Parse("allowlist", []string{"example.com", "198.51.100.0/24:80"})
	p, _ = p.WithDNS("strict")
	p, _ = p.WithPrivateBlocked()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"mode":"allowlist","allow":["example.com","198.51.100.0/24:80"],"dns":"strict","block_private":true}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil || back.String() != p.String() || back.DNS != DNSStrict || !back.BlockPrivate {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	plain, _ := json.Marshal(Policy{Mode: ModeOpen})
	if string(plain) != `{"mode":"open"}` {
		t.Errorf("JSON of open: %s (the options are omitted when unset)", plain)
	}
	for _, in := range []string{
		`{"mode":"open","dns":"strict"}`,
		`{"mode":"allowlist","allow":["*.example.com"],"dns":"strict"}`,
		`{"mode":"allowlist","allow":["10.0.0.0/8:22"],"block_private":true}`,
		`{"mode":"allowlist","dns":"bogus"}`,
	} {
		var q Policy
		if err := json.Unmarshal([]byte(in), &q); err == nil || !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmarshal(%s): %v, want ErrInvalid", in, err)
		}
	}
}
