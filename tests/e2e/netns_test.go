package e2e

// The stand-in outside world of the network tests: a network namespace
// this test creates, joined to the host by a veth pair, that owns the
// metadata address 169.254.169.254 and a stand-in public address
// 198.51.100.10 (TEST-NET-2). Only the sandboxes' traffic is routed there
// (a policy routing rule for the daemon's address pool, with an
// unreachable default), so nothing of the test — and nothing of the
// host's own traffic — leaves this machine.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/tests/testenv"
)

// Addresses inside the test namespace.
var (
	metadataAddr = netip.MustParseAddr("169.254.169.254")
	outsideAddr  = netip.MustParseAddr("198.51.100.10")
)

// outside is the test namespace and the host's routes into it.
type outside struct {
	t        *testing.T
	name     string // netns name
	ns       netns.NsHandle
	vethHost string
	table    int
	pool     netip.Prefix
	rule     *netlink.Rule
	mu       sync.Mutex
	hits     map[string]int // "ADDR:PORT" → connections accepted
	lns      []net.Listener
}

// newOutside makes the namespace with HTTP servers on
// 169.254.169.254:80, 198.51.100.10:8080 and 198.51.100.10:8081 (each
// answers "outside ADDR:PORT\n", or a body of n bytes for /bytes/N) and
// routes traffic from pool (the daemon's sandbox subnets) into it. n
// makes the names unique per test.
func newOutside(t *testing.T, pool netip.Prefix, n int) *outside {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "network tests need root (netns, veth, nftables)")
	}
	id := os.Getpid()%10000*10 + n
	o := &outside{
		t: t, name: fmt.Sprintf("abxtest%d", id), vethHost: fmt.Sprintf("abvh%d", id),
		table: 20000 + id, pool: pool, hits: map[string]int{},
	}
	t.Cleanup(o.close)

	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.NewNamed(o.name)
	netns.Set(orig)
	orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatalf("create netns %s: %v", o.name, err)
	}
	o.ns = ns

	hostIP := netip.AddrFrom4([4]byte{10, 254, byte(id % 250), 1})
	nsIP := hostIP.Next()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: o.vethHost}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}
	must(t, "add veth", netlink.LinkAdd(veth))
	hl, err := netlink.LinkByName(o.vethHost)
	must(t, "veth", err)
	must(t, "veth address", netlink.AddrAdd(hl, &netlink.Addr{IPNet: ipnet(hostIP, 30)}))
	must(t, "veth up", netlink.LinkSetUp(hl))

	nh, err := netlink.NewHandleAt(ns)
	must(t, "netlink in netns", err)
	defer nh.Close()
	pl, err := nh.LinkByName("eth0")
	must(t, "netns veth", err)
	must(t, "netns veth address", nh.AddrAdd(pl, &netlink.Addr{IPNet: ipnet(nsIP, 30)}))
	must(t, "netns veth up", nh.LinkSetUp(pl))
	lo, err := nh.LinkByName("lo")
	must(t, "netns lo", err)
	must(t, "netns lo up", nh.LinkSetUp(lo))
	for _, a := range []netip.Addr{metadataAddr, outsideAddr} {
		must(t, "netns address "+a.String(), nh.AddrAdd(lo, &netlink.Addr{IPNet: ipnet(a, 32)}))
	}

	// Policy routing: only packets from the sandbox pool use table T:
	// the pool itself falls through to the main table (throw), the two
	// stand-in addresses go into the namespace, everything else is
	// unreachable.
	routes := []*netlink.Route{
		{Table: o.table, Dst: prefixNet(pool), Type: unix.RTN_THROW},
		{Table: o.table, Dst: ipnet(metadataAddr, 32), Gw: net.IP(nsIP.AsSlice()), LinkIndex: hl.Attrs().Index},
		{Table: o.table, Dst: ipnet(outsideAddr, 32), Gw: net.IP(nsIP.AsSlice()), LinkIndex: hl.Attrs().Index},
		{Table: o.table, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Type: unix.RTN_UNREACHABLE},
	}
	for _, r := range routes {
		must(t, "route "+r.Dst.String(), netlink.RouteAdd(r))
	}
	rule := netlink.NewRule()
	rule.Src = prefixNet(pool)
	rule.Table = o.table
	rule.Priority = 100
	must(t, "ip rule", netlink.RuleAdd(rule))
	o.rule = rule

	for _, ap := range []string{"169.254.169.254:80", "198.51.100.10:8080", "198.51.100.10:8081"} {
		o.listen(ap)
	}
	return o
}

// listen serves HTTP on ap inside the namespace and counts connections.
func (o *outside) listen(ap string) {
	o.t.Helper()
	var ln net.Listener
	var err error
	done := make(chan struct{})
	go func() { // a thread of its own: it switches namespaces
		defer close(done)
		// A goroutine that exits while locked takes its thread with it:
		// the thread is only handed back once it is in the host's
		// namespace again.
		runtime.LockOSThread()
		orig, _ := netns.Get()
		defer orig.Close()
		if err = netns.Set(o.ns); err != nil {
			return
		}
		ln, err = net.Listen("tcp", ap)
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
	}()
	<-done
	must(o.t, "listen in netns on "+ap, err)
	o.lns = append(o.lns, countingListener{Listener: ln, hit: func() { o.hit(ap) }})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			var size int
			fmt.Sscan(n, &size)
			w.Header().Set("Content-Length", fmt.Sprint(size))
			writeZeros(w, size)
			return
		}
		fmt.Fprintf(w, "outside %s\n", ap)
	})}
	go srv.Serve(o.lns[len(o.lns)-1])
}

func (o *outside) hit(ap string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.hits[ap]++
}

// hitsOf returns how many connections ap accepted.
func (o *outside) hitsOf(ap string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.hits[ap]
}

// close removes the rule, the routes, the veth pair and the namespace.
func (o *outside) close() {
	for _, ln := range o.lns {
		ln.Close()
	}
	if o.rule != nil {
		if err := netlink.RuleDel(o.rule); err != nil {
			o.t.Errorf("delete ip rule: %v", err)
		}
	}
	routes, _ := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: o.table}, netlink.RT_FILTER_TABLE)
	for _, r := range routes {
		netlink.RouteDel(&r)
	}
	if l, err := netlink.LinkByName(o.vethHost); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			o.t.Errorf("delete veth %s: %v", o.vethHost, err)
		}
	}
	if o.ns.IsOpen() {
		o.ns.Close()
		if err := netns.DeleteNamed(o.name); err != nil {
			o.t.Errorf("delete netns %s: %v", o.name, err)
		}
	}
}

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	hit func()
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.hit()
	}
	return c, err
}

// nftTableExists reports whether the inet table name is in the kernel.
func nftTableExists(t *testing.T, name string) bool {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	ts, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range ts {
		if tb.Name == name {
			return true
		}
	}
	return false
}

// deleteTable removes the daemon's nftables table after checking that no
// sandbox's chains are left in it, and that no tap of the daemon is left.
func deleteTable(t *testing.T, name string) {
	t.Helper()
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ch := range chains {
		if ch.Table.Name != name {
			continue
		}
		found = true
		if strings.HasPrefix(ch.Name, "in-") || strings.HasPrefix(ch.Name, "fwd-") {
			t.Errorf("nftables table %s still has sandbox chain %s after every sandbox was removed", name, ch.Name)
		}
		rules, _ := c.GetRules(ch.Table, ch)
		for _, r := range rules {
			if strings.HasPrefix(string(r.UserData), "sb:") {
				t.Errorf("nftables chain %s still has rule %q after every sandbox was removed", ch.Name, r.UserData)
			}
		}
	}
	links, _ := netlink.LinkList()
	for _, l := range links {
		if l.Attrs().Alias == "agentbox:"+name {
			t.Errorf("tap %s of table %s is left", l.Attrs().Name, name)
			netlink.LinkDel(l)
		}
	}
	if found {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
		if err := c.Flush(); err != nil {
			t.Errorf("delete nftables table %s: %v", name, err)
		}
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ipnet(a netip.Addr, bits int) *net.IPNet {
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(bits, a.BitLen())}
}

func prefixNet(p netip.Prefix) *net.IPNet { return ipnet(p.Masked().Addr(), p.Bits()) }

// writeZeros writes n zero bytes to w in 64 KiB chunks.
func writeZeros(w interface{ Write([]byte) (int, error) }, n int) {
	buf := make([]byte, 64<<10)
	for n > 0 {
		k := min(n, len(buf))
		if _, err := w.Write(buf[:k]); err != nil {
			return
		}
		n -= k
	}
}
