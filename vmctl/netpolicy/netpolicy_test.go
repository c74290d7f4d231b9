package netpolicy

import (
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	pfx := netip.MustParsePrefix
	for _, tc := range []struct {
		in   string
		want Rule
		str  string
	}{
		{"example.com", Rule{Kind: RuleName, Name: "example.com"}, "example.com"},
		{"Example.COM.", Rule{Kind: RuleName, Name: "example.com"}, "example.com"},
		{"example.com:8443", Rule{Kind: RuleName, Name: "example.com", Port: 8443}, "example.com:8443"},
		{"*.example.com", Rule{Kind: RuleName, Name: "*.example.com"}, "*.example.com"},
		{"*.Example.com:443", Rule{Kind: RuleName, Name: "*.example.com", Port: 443}, "*.example.com:443"},
		{"xn--bcher-kva.example", Rule{Kind: RuleName, Name: "xn--bcher-kva.example"}, "xn--bcher-kva.example"},
		{"intranet", Rule{Kind: RuleName, Name: "intranet"}, "intranet"},
		{" proxy.local:3128 ", Rule{Kind: RuleName, Name: "proxy.local", Port: 3128}, "proxy.local:3128"},
		{"198.51.100.0/24:8080", Rule{Kind: RuleCIDR, Prefix: pfx("198.51.100.0/24"), Port: 8080}, "198.51.100.0/24:8080"},
		{"198.51.100.7:80", Rule{Kind: RuleCIDR, Prefix: pfx("198.51.100.7/32"), Port: 80}, "198.51.100.7/32:80"},
		{"10.0.0.0/8:22", Rule{Kind: RuleCIDR, Prefix: pfx("10.0.0.0/8"), Port: 22}, "10.0.0.0/8:22"},
		{"203.0.113.0/24:53", Rule{Kind: RuleCIDR, Prefix: pfx("203.0.113.0/24"), Port: 53}, "203.0.113.0/24:53"},
		{"[2001:db8::]/32:443", Rule{Kind: RuleCIDR, Prefix: pfx("2001:db8::/32"), Port: 443}, "[2001:db8::]/32:443"},
		{"[2001:DB8::1]:443", Rule{Kind: RuleCIDR, Prefix: pfx("2001:db8::1/128"), Port: 443}, "[2001:db8::1]/128:443"},
		{"host:5432", Rule{Kind: RuleHost, Port: 5432}, "host:5432"},
		{"HOST:65535", Rule{Kind: RuleHost, Port: 65535}, "host:65535"},
	} {
		got, err := ParseRule(tc.in)
		if err != nil {
			t.Errorf("ParseRule(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseRule(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if s := got.String(); s != tc.str {
			t.Errorf("ParseRule(%q).String() = %q, want %q", tc.in, s, tc.str)
		}
		again, err := ParseRule(got.String())
		if err != nil || again != got {
			t.Errorf("round trip of %q: %+v, %v", got.String(), again, err)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	for _, tc := range []struct{ in, msg string }{
		{"", "empty destination"},
		{"10.0.0.0/8", "needs a port: 10.0.0.0/8:PORT"},
		{"198.51.100.7", "needs a port: 198.51.100.7:PORT"},
		{"[2001:db8::]/32", "needs a port: [2001:db8::]/32:PORT"},
		{"[2001:db8::1]", "needs a port: [2001:db8::1]:PORT"},
		{"[2001:db8::1]:", "needs a port"},
		{"2001:db8::1", "brackets with a port: [2001:db8::1]:PORT"},
		{"2001:db8::/32", "[2001:db8::]/32:PORT"},
		{"[198.51.100.7]:80", "not an IPv6 address"},
		{"[fe80::1%eth0]:80", "not an IPv6 address"},
		{"[2001:db8::1]x", `unexpected "x"`},
		{"[2001:db8::1", "missing ']'"},
		{"10.0.0.1/8:22", "write 10.0.0.0/8:22"},
		{"[2001:db8::1]/32:443", "write [2001:db8::]/32:443"},
		{"0.0.0.0/0:443", "use --network open"},
		{"[::]/0:443", "use --network open"},
		{"127.0.0.1:80", "the host's loopback is reached with host:PORT (as host.agentbox.internal:PORT): --allow host:80"},
		{"127.0.0.1:18089", "--allow host:18089"},
		{"127.0.0.0/8:5432", "--allow host:5432"},
		{"127.5.0.0/16:22", "--allow host:22"},
		{"[::1]:8080", "--allow host:8080"},
		{"126.0.0.0/7:80", "loopback 127.0.0.0/8, which a sandbox may never reach; list narrower ranges"},
		{"http://files.test/", "give a host name, not a URL: --allow files.test (or files.test:PORT)"},
		{"https://files.test", "give a host name, not a URL: --allow files.test (or files.test:PORT)"},
		{"https://files.test/a/b?c=d#e", "--allow files.test (or files.test:PORT)"},
		{"http://files.test:8080/x", "give a host name, not a URL: --allow files.test:8080 (or --allow files.test for TCP 80 and 443)"},
		{"http://user:pw@files.test/", "--allow files.test (or files.test:PORT)"},
		{"http://[2001:db8::1]:80/", "give a host name, not a URL (http://...): --allow NAME (or NAME:PORT)"},
		{"ftp://", "not a URL (ftp://...)"},
		{"100.64.0.0/16:80", ""}, // allowed, checked below as success
		{"169.254.169.254:80", "link-local 169.254.0.0/16"},
		{"169.0.0.0/8:80", "link-local"},
		{"224.0.0.1:80", "multicast"},
		{"[::1]:80", "--allow host:80"},
		{"[fe80::]/10:80", "link-local fe80::/10"},
		{"[ff02::1]:80", "multicast"},
		{"[fd00:ec2::254]:80", "metadata"},
		{"100.100.100.200:80", "metadata"},
		{"[::ffff:198.51.100.7]:80", "IPv4 form"},
		{"host", "host needs a port: host:PORT"},
		{"host:0", "want a number 1..65535"},
		{"host:65536", "want a number 1..65535"},
		{"host:53", "resolver"},
		{"host:abc", "want a number"},
		{"example.com:", "empty port"},
		{"example.com:53", "port 53"},
		{"example.com:-1", "want a number"},
		{"example.com:80:80", "not a destination"},
		{"100.64.0.0/9:80", "write 100.0.0.0/9:80"},
		{"exa mple.com", "only letters"},
		{"exa_mple.com", "only letters"},
		{"-example.com", "start or end with '-'"},
		{"example..com", "1..63 characters"},
		{".", "empty name"},
		{strings.Repeat("a", 64) + ".com", "1..63"},
		{strings.Repeat("a.", 127) + "com", "at most 253"},
		{"bücher.example", "punycode"},
		{"ex*ample.com", "whole first label"},
		{"*.*.example.com", "whole first label"},
		{"*", "whole first label"},
		{"*..", "empty name"},
		{"*.com", "at least two labels"},
		{"1.2.3", "neither a name nor an IP"},
		{"999.1.1.1:80", "neither a name nor an IP"},
		{"host.agentbox.internal", "reserved"},
		{"*.agentbox.internal", "reserved"},
		{"x.host.agentbox.internal:80", "reserved"},
		{"localhost", "localhost"},
		{"a.localhost:80", "localhost"},
	} {
		r, err := ParseRule(tc.in)
		if tc.msg == "" {
			if err != nil {
				t.Errorf("ParseRule(%q): %v", tc.in, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("ParseRule(%q) = %v, want error containing %q", tc.in, r, tc.msg)
			continue
		}
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseRule(%q) error %q, want ErrInvalid containing %q", tc.in, err, tc.msg)
		}
	}
}

func TestParsePolicy(t *testing.T) {
	p, err := Parse("allowlist", []string{"example.com", "api.example.org:8443", "198.51.100.0/24:8080", "host:5432", "example.com", "*.cdn.example.net:443", "[2001:db8::]/32:443", "host:8000"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"example.com", "api.example.org:8443", "198.51.100.0/24:8080", "host:5432", "*.cdn.example.net:443", "[2001:db8::]/32:443", "host:8000"}
	if got := p.Strings(); !reflect.DeepEqual(got, want) {
		t.Errorf("Strings() = %q, want %q", got, want)
	}
	if got := p.TCPPorts(); !reflect.DeepEqual(got, []uint16{80, 443, 5432, 8000, 8443}) {
		t.Errorf("TCPPorts() = %v", got)
	}
	if got := p.NamePorts(); !reflect.DeepEqual(got, []uint16{80, 443, 8443}) {
		t.Errorf("NamePorts() = %v", got)
	}
	if got := p.HostPorts(); !reflect.DeepEqual(got, []uint16{5432, 8000}) {
		t.Errorf("HostPorts() = %v", got)
	}
	if got := p.Names(); !reflect.DeepEqual(got, []string{"*.cdn.example.net", "api.example.org", "example.com"}) {
		t.Errorf("Names() = %q", got)
	}
	cidrs := p.CIDRRules()
	if len(cidrs) != 2 || cidrs[0].String() != "198.51.100.0/24:8080" || cidrs[1].String() != "[2001:db8::]/32:443" {
		t.Errorf("CIDRRules() = %v", cidrs)
	}
	for _, tc := range []struct {
		name string
		port uint16
		any  bool
		want bool
	}{
		{"example.com", 80, true, true},
		{"EXAMPLE.com.", 443, true, true},
		{"example.com", 8443, true, false},
		{"www.example.com", 443, false, false},
		{"api.example.org", 8443, true, true},
		{"api.example.org", 443, true, false},
		{"a.cdn.example.net", 443, true, true},
		{"a.b.cdn.example.net", 443, true, true},
		{"a.cdn.example.net", 80, true, false},
		{"cdn.example.net", 443, false, false},
		{"xcdn.example.net", 443, false, false},
		{"host.agentbox.internal", 5432, false, false},
		{"", 443, false, false},
	} {
		if got := p.AllowsNamePort(tc.name, tc.port); got != tc.want {
			t.Errorf("AllowsNamePort(%q, %d) = %v, want %v", tc.name, tc.port, got, tc.want)
		}
		if got := p.AllowsName(tc.name); got != tc.any {
			t.Errorf("AllowsName(%q) = %v, want %v", tc.name, got, tc.any)
		}
	}
	if !p.HasNIC() || p.Validate() != nil {
		t.Errorf("HasNIC %v Validate %v", p.HasNIC(), p.Validate())
	}

	for _, tc := range []struct {
		mode  string
		allow []string
		want  string
	}{
		{"", nil, "none"},
		{"none", nil, "none"},
		{"allowlist", nil, "allowlist"},
		{"open", nil, "open"},
		{"open", []string{"host:8080"}, "open[host:8080]"},
	} {
		p, err := Parse(tc.mode, tc.allow)
		if err != nil || p.String() != tc.want {
			t.Errorf("Parse(%q, %q) = %v, %v; want %s", tc.mode, tc.allow, p, err, tc.want)
		}
	}
	if p, _ := Parse("", nil); p.HasNIC() || len(p.TCPPorts()) != 0 {
		t.Errorf("mode none: %v", p)
	}

	for _, tc := range []struct {
		mode  string
		allow []string
		msg   string
	}{
		{"bogus", nil, `unknown network mode "bogus": use none, allowlist or open`},
		{"Allowlist", nil, "unknown network mode"},
		{"none", []string{"example.com"}, "--allow example.com needs a network: add --network allowlist"},
		{"", []string{"host:80"}, "needs a network"},
		{"open", []string{"example.com"}, "only host:PORT rules"},
		{"open", []string{"198.51.100.0/24:80"}, "only host:PORT rules"},
		{"allowlist", []string{"example.com", "host:443"}, "--allow host:443 and --allow example.com both need port 443"},
		{"allowlist", []string{"host:8443", "*.example.com:8443"}, "both need port 8443"},
		{"allowlist", []string{"example.com", "10.0.0.0/8"}, "needs a port: 10.0.0.0/8:PORT"},
	} {
		_, err := Parse(tc.mode, tc.allow)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("Parse(%q, %q) error %v, want ErrInvalid containing %q", tc.mode, tc.allow, err, tc.msg)
		}
	}
}

func TestPolicyJSON(t *testing.T) {
	p, err := Parse("allowlist", []string{"Example.com:443", "198.51.100.0/24:8080", "host:5432"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"mode":"allowlist","allow":["example.com:443","198.51.100.0/24:8080","host:5432"]}`
	if string(b) != want {
		t.Errorf("Marshal = %s, want %s", b, want)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, p) {
		t.Errorf("Unmarshal = %+v, want %+v", back, p)
	}
	if b, _ := json.Marshal(Policy{Mode: ModeNone}); string(b) != `{"mode":"none"}` {
		t.Errorf("none = %s", b)
	}
	for _, in := range []string{
		`{"mode":"none","allow":["example.com"]}`,
		`{"mode":"allowlist","allow":["0.0.0.0/0:80"]}`,
		`{"mode":"weird"}`,
		`{"mode":"allowlist","allow":[1]}`,
	} {
		var p Policy
		if err := json.Unmarshal([]byte(in), &p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unmarshal(%s) = %v, want ErrInvalid", in, err)
		}
	}
	if _, err := json.Marshal(Policy{Mode: ModeAllowlist, Allow: []Rule{{}}}); err == nil {
		t.Errorf("Marshal of a zero Rule succeeded")
	}
}

// FuzzParseRule: no panics; every accepted DEST has a canonical String that
// parses back to the same Rule; accepted CIDRs never touch refused ranges.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "198.51.100.0/24:8080", "[2001:db8::]/32:443",
		"[2001:db8::1]:1", "host:5432", "10.0.0.1:22", "0.0.0.0/0:1", "[::ffff:1.2.3.4]:80", "a..b", "[", "]:", "host:", ":80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRule(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("ParseRule(%q) error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		again, err := ParseRule(r.String())
		if err != nil || again != r {
			t.Fatalf("ParseRule(%q) = %+v; its String %q parses to %+v, %v", s, r, r.String(), again, err)
		}
		switch r.Kind {
		case RuleName:
			probe := strings.ToUpper(r.Name) + "."
			if base, ok := strings.CutPrefix(r.Name, "*."); ok {
				probe = "X." + base
			}
			if r.Name == "" || r.Name != strings.ToLower(r.Name) || !r.MatchName(probe) {
				t.Fatalf("ParseRule(%q) name %q", s, r.Name)
			}
		case RuleCIDR:
			if r.Port == 0 || r.Prefix != r.Prefix.Masked() {
				t.Fatalf("ParseRule(%q) = %+v", s, r)
			}
			for _, bad := range refused {
				if r.Prefix.Overlaps(bad.prefix) {
					t.Fatalf("ParseRule(%q) = %v covers %s", s, r, bad.what)
				}
			}
		case RuleHost:
			if r.Port == 0 || r.Port == 53 {
				t.Fatalf("ParseRule(%q) = %+v", s, r)
			}
		default:
			t.Fatalf("ParseRule(%q) kind %v", s, r.Kind)
		}
		p, err := Parse("allowlist", []string{s})
		if err != nil || len(p.Allow) != 1 || p.Allow[0] != r {
			t.Fatalf("Parse(allowlist, %q) = %v, %v", s, p, err)
		}
	})
}
