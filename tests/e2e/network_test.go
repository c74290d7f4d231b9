package e2e

// Network policies with real traffic: a daemon with its own nftables table
// and address pool, real TCG guests, test servers on 127.0.0.0/8 (reached
// by name through the egress proxy) and in a network namespace the test
// creates (outside, metadata). See netns_test.go.

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/tests/testenv"
)

// probePy is what the guest runs for every check (python3 of the test
// image):
//
//	get URL            the body on stdout (unverified TLS)
//	connect HOST PORT  "connected", "refused", "timeout" or "error ..."
//	resolve NAME       the address, or "nxdomain"
//	listen PORT        accept connections and answer "guest PORT\n" (never ends)
//	time URL           "BYTES SECONDS" of a download
const probePy = `
import socket, ssl, sys, time, urllib.request
op = sys.argv[1]
if op == "get":
    ctx = ssl._create_unverified_context()
    sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[2], timeout=30, context=ctx).read())
elif op == "time":
    ctx = ssl._create_unverified_context()
    t = time.monotonic(); n = 0
    with urllib.request.urlopen(sys.argv[2], timeout=60, context=ctx) as r:
        while True:
            b = r.read(1 << 16)
            if not b: break
            n += len(b)
    print(n, time.monotonic() - t)
elif op == "connect":
    s = socket.socket(); s.settimeout(3)
    try:
        s.connect((sys.argv[2], int(sys.argv[3]))); print("connected")
    except ConnectionRefusedError: print("refused")
    except socket.timeout: print("timeout")
    except OSError as e: print("error", e.errno)
elif op == "resolve":
    try: print(socket.gethostbyname(sys.argv[2]))
    except socket.gaierror as e: print("nxdomain" if e.errno == socket.EAI_NONAME else "gaierror %d" % e.errno)
elif op == "listen":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(sys.argv[2]))); s.listen(8)
    while True:
        c, _ = s.accept(); c.sendall(b"guest %s\n" % sys.argv[2].encode()); c.close()
`

// wireNetwork is the "network" of a sandbox in the API.
type wireNetwork struct {
	Mode    string   `json:"mode"`
	Allow   []string `json:"allow"`
	Address string   `json:"address"`
	Gateway string   `json:"gateway"`
	Tap     string   `json:"tap"`
	MAC     string   `json:"mac"`
}

// probe runs probePy in sandbox ref and returns its stdout; it fails the
// test unless the probe exits 0.
func (d *daemon) probe(ref string, args ...string) string {
	d.t.Helper()
	req, _ := json.Marshal(map[string]any{"cmd": append([]string{"python3", "-c", probePy}, args...), "timeout_ms": 90000})
	r := d.mustExec(ref, string(req))
	if r.exit == nil || r.exit.ExitCode != 0 {
		d.t.Fatalf("probe %v in %s: exit %+v, error %+v, stderr %q", args, ref, r.exit, r.err, r.stderr)
	}
	return string(r.stdout)
}

// expectProbe runs a probe and compares its whole stdout.
func (d *daemon) expectProbe(ref, want string, args ...string) {
	d.t.Helper()
	if got := d.probe(ref, args...); got != want {
		d.t.Errorf("probe %v in %s: %q, want %q", args, ref, got, want)
	}
}

// network returns the sandbox's "network" from GET /v1/sandboxes/{ref}.
func (d *daemon) network(ref string) wireNetwork {
	d.t.Helper()
	var sb struct {
		Network *wireNetwork `json:"network"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &sb)
	if sb.Network == nil {
		d.t.Fatalf("GET sandbox %s: no \"network\"", ref)
	}
	return *sb.Network
}

// hostAddr returns an IPv4 address of this host that is not loopback and
// not one of the sandboxes' taps or the test's veth (the host's own
// address, e.g. eth0's): a target the guests must not reach.
func hostAddr(t *testing.T) netip.Addr {
	links, _ := netlink.LinkList()
	for _, l := range links {
		n := l.Attrs().Name
		if n == "lo" || strings.HasPrefix(n, "abx") || strings.HasPrefix(n, "abv") {
			continue
		}
		addrs, _ := netlink.AddrList(l, netlink.FAMILY_V4)
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok {
				return ip
			}
		}
	}
	t.Fatal("no non-loopback IPv4 address on this host")
	return netip.Addr{}
}

func TestNetworkPolicies(t *testing.T) {
	n := os.Getpid() % 200
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 213, byte(n), 0}), 24)
	table := fmt.Sprintf("abxtest%d", os.Getpid())
	out := newOutside(t, pool, 1)
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_forward"); err == nil {
		t.Cleanup(func() { os.WriteFile("/proc/sys/net/ipv4/ip_forward", b, 0) })
	}

	// The allowlisted name's servers on a loopback address of their own.
	lo := netip.AddrFrom4([4]byte{127, 77, byte(n), 1})
	payload := make([]byte, 200<<10)
	rand.Read(payload)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/payload" {
			w.Write(payload)
			return
		}
		if n, ok := strings.CutPrefix(r.URL.Path, "/bytes/"); ok {
			var size int
			fmt.Sscan(n, &size)
			w.Header().Set("Content-Length", fmt.Sprint(size))
			writeZeros(w, size)
			return
		}
		http.NotFound(w, r)
	})
	for _, port := range []string{"80", "443"} {
		ln, err := net.Listen("tcp", lo.String()+":"+port)
		must(t, "listen on "+lo.String()+":"+port, err)
		srv := httptest.NewUnstartedServer(handler)
		srv.Listener = ln
		if port == "443" {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		t.Cleanup(srv.Close)
	}

	token := fmt.Sprintf("%x", payload[:32])
	tokenFile := filepath.Join(t.TempDir(), "token")
	must(t, "token", os.WriteFile(tokenFile, []byte(token), 0o600))
	t.Cleanup(func() { // cleanups run last first: after the daemon's, which removes every sandbox and stops it
		if nftTableExists(t, table) {
			t.Errorf("the daemon left its nftables table %s after it stopped with no sandbox", table)
		}
		deleteTable(t, table)
	})
	d := newDaemon(t, "--listen-tcp", "0.0.0.0:0", "--network-table", table, "--network-pool", pool.String(),
		"--network-host", "example.test="+lo.String())
	d.Globals = []string{"--token-file", tokenFile}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var m []string
	testenv.WaitFor(t, 30*time.Second, "the TCP listener's address in the daemon's log", func() bool {
		m = regexp.MustCompile(`msg="API listening" network=tcp addr=\S*:(\d+)`).FindStringSubmatch(d.Log.String())
		return m != nil
	})
	apiPort := m[1]
	self := hostAddr(t)
	// Control: the API answers on the host's own address (401 without
	// the token), so a guest's failure to connect is the firewall's doing.
	if resp, err := (&http.Client{Timeout: 30 * time.Second}).Get("http://" + self.String() + ":" + apiPort + "/v1/info"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("control: GET the API on %s:%s from the host: %v %v", self, apiPort, resp, err)
	}

	// Bad policies: refused with the reason, nothing made.
	for _, bad := range [][]string{
		{"--network", "allowlist", "--allow", "0.0.0.0/0:80"},
		{"--network", "none", "--allow", "example.test"},
		{"--network", "bogus"},
		{"--network", "allowlist", "--allow", "[64:ff9b::a9fe:a9fe]:80"}, // 169.254.169.254 through NAT64
		{"--network", "allowlist", "--allow", "*.example.test", "--dns", "strict"},
		{"--network", "open", "--dns", "strict"},
	} {
		r := d.cli(nil, append([]string{"create", "--image", imageDir(t), "--accel", "tcg"}, bad...)...)
		if r.code != 125 || len(r.stdout) != 0 || !strings.Contains(string(r.stderr), "network") && !strings.Contains(string(r.stderr), "allow") {
			t.Errorf("create %v: exit %d, stdout %q, stderr %q; want 125 with the reason", bad, r.code, r.stdout, r.stderr)
		}
	}
	d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"network":{"mode":"allowlist","allow":["169.254.169.254/32:80"]}`)), http.StatusBadRequest, "invalid_argument")
	if l := d.list(""); len(l) != 0 {
		t.Fatalf("refused creates left sandboxes: %v", ids(l))
	}

	// A: allowlist through the CLI; B: open through the API; C: none.
	r := d.cli(nil, "create", "--image", imageDir(t), "--accel", "tcg", "--boot-timeout", "180s", "--name", "netA",
		"--network", "allowlist", "--allow", "example.test", "--allow", "198.51.100.10:8080")
	if r.code != 0 {
		t.Fatalf("create netA: exit %d, stderr %s", r.code, r.stderr)
	}
	a := strings.TrimSpace(string(r.stdout))
	d.Track(a)
	b := d.create(createBody(t, `"name":"netB","boot_timeout_ms":180000,"network":{"mode":"open"}`)).ID
	c := d.create(createBody(t, `"name":"netC","boot_timeout_ms":180000`)).ID

	na, nb, nc := d.network(a), d.network(b), d.network(c)
	if na.Mode != "allowlist" || !slices.Equal(na.Allow, []string{"example.test", "198.51.100.10/32:8080"}) || na.Tap != "abx"+a {
		t.Errorf("netA network %+v", na)
	}
	if nb.Mode != "open" || len(nb.Allow) != 0 || nb.Tap != "abx"+b {
		t.Errorf("netB network %+v", nb)
	}
	if nc.Mode != "none" || nc.Allow != nil || nc.Address != "" || nc.Gateway != "" || nc.Tap != "" || nc.MAC != "" {
		t.Errorf("netC network %+v, want mode none and nothing else", nc)
	}
	for _, nw := range []wireNetwork{na, nb} {
		p, err := netip.ParsePrefix(nw.Address)
		if err != nil || p.Bits() != 30 || !pool.Contains(p.Addr()) || netip.MustParseAddr(nw.Gateway).Next() != p.Addr() {
			t.Errorf("network %+v: want a /30 of %s with the gateway just below the address", nw, pool)
		}
	}
	// The edges at the tap (read from the kernel, no traffic sent there):
	// every sandbox's chain drops the metadata address 100.100.100.200,
	// open mode's CGNAT 100.64.0.0/10 as well.
	if got := fwdDrops(t, table, a); got != neverDrops {
		t.Errorf("netA (allowlist): forward chain drops %s, want %s", got, neverDrops)
	}
	if got, want := fwdDrops(t, table, b), neverDrops+" 100.64.0.0/10"; got != want {
		t.Errorf("netB (open): forward chain drops %s, want %s", got, want)
	}
	gA, hA := strings.Split(na.Address, "/")[0], na.Gateway
	gB, hB := strings.Split(nb.Address, "/")[0], nb.Gateway

	// Interfaces: none has only lo.
	d.expectExec(c, `{"cmd":["ls","/sys/class/net"]}`, 0, "lo\n", "")
	// The image carries no resolver of the build host; the agent writes
	// one only for a sandbox with a network.
	d.expectExec(c, `{"cmd":["cat","/etc/resolv.conf"]}`, 0, "# agentbox: written by the guest agent when the sandbox has a network\n", "")
	d.expectExec(a, `{"cmd":["ls","/sys/class/net"]}`, 0, "eth0\nlo\n", "")
	d.expectExec(a, `{"cmd":["cat","/etc/resolv.conf"]}`, 0, "nameserver "+hA+"\n", "")
	// The gateway's MAC is pinned: a permanent entry (flags 0x6) with the
	// tap's fixed address, so the guest needs no ARP on its link (a flood
	// of its own connects can starve ARP's probes).
	for _, x := range [][2]string{{a, hA}, {b, hB}} {
		id, gw := x[0], x[1]
		want := fmt.Sprintf("%s 0x1 0x6 02:aa:%s:%s:%s:%s * eth0\n", gw, id[0:2], id[2:4], id[4:6], id[6:8])
		d.expectExec(id, `{"cmd":["sh","-c","grep '^`+gw+` ' /proc/net/arp | tr -s ' '"]}`, 0, want, "")
	}

	// Listeners in A and B (detached), reachable from the host.
	for _, ref := range []string{a, b} {
		req, _ := json.Marshal(map[string]any{"cmd": []string{"python3", "-c", probePy, "listen", "9000"}})
		var p wireProcess
		d.callJSON("POST", "/v1/sandboxes/"+ref+"/processes", string(req), http.StatusCreated, &p)
	}
	for _, g := range []string{gA, gB} {
		var got []byte
		testenv.WaitFor(t, time.Minute, "the guest listener on "+g+":9000 from the host", func() bool {
			conn, err := net.DialTimeout("tcp", g+":9000", 2*time.Second)
			if err != nil {
				return false
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			got = make([]byte, 64)
			k, _ := conn.Read(got)
			got = got[:k]
			return true
		})
		if string(got) != "guest 9000\n" {
			t.Errorf("guest listener %s: %q", g, got)
		}
	}

	// A (allowlist): the name by HTTP and HTTPS, byte for byte.
	if got := d.probe(a, "get", "http://example.test/payload"); got != string(payload) {
		t.Errorf("netA: http://example.test/payload: %d bytes, want the %d-byte payload", len(got), len(payload))
	}
	if got := d.probe(a, "get", "https://example.test/payload"); got != string(payload) {
		t.Errorf("netA: https://example.test/payload: %d bytes, want the %d-byte payload", len(got), len(payload))
	}
	d.expectProbe(a, hA+"\n", "resolve", "example.test")
	d.expectProbe(a, "nxdomain\n", "resolve", "unlisted.test")
	d.expectProbe(a, "nxdomain\n", "resolve", "metadata.google.internal")
	// The CIDR rule's port, and nothing else there.
	d.expectProbe(a, "outside 198.51.100.10:8080\n", "get", "http://198.51.100.10:8080/")
	for _, target := range [][2]string{
		{hA, "8081"},              // an unlisted port at the allowed name's address
		{hA, "22"},                //
		{hA, apiPort},             // the daemon's TCP API on the sandbox's gateway
		{self.String(), apiPort},  // ... and on the host's own address
		{"198.51.100.10", "8081"}, // another port of the CIDR rule's host
		{"169.254.169.254", "80"}, // metadata
		{gB, "9000"},              // another sandbox
	} {
		d.expectProbe(a, "timeout\n", "connect", target[0], target[1])
	}

	// B (open): the outside on any port; never the host, metadata or A.
	d.expectProbe(b, "outside 198.51.100.10:8081\n", "get", "http://198.51.100.10:8081/")
	for _, target := range [][2]string{
		{hB, apiPort}, {self.String(), apiPort}, {hA, "80"}, {"169.254.169.254", "80"}, {gA, "9000"},
	} {
		d.expectProbe(b, "timeout\n", "connect", target[0], target[1])
	}
	// C (none): nothing at all.
	d.expectProbe(c, "error 101\n", "connect", "198.51.100.10", "8081") // ENETUNREACH

	if h := out.hitsOf("169.254.169.254:80"); h != 0 {
		t.Errorf("the metadata listener accepted %d connections, want 0", h)
	}
	if h := out.hitsOf("198.51.100.10:8081"); h != 1 {
		t.Errorf("198.51.100.10:8081 accepted %d connections, want 1 (netB's)", h)
	}

	if os.Getenv("AGENTBOX_NET_BENCH") != "" {
		size := 32 << 20
		for _, tc := range []struct{ ref, url, what string }{
			{a, fmt.Sprintf("http://example.test/bytes/%d", size), "allowlisted name through the egress proxy"},
			{b, fmt.Sprintf("http://198.51.100.10:8081/bytes/%d", size), "open mode, routed and masqueraded"},
		} {
			var bytes int
			var secs float64
			fmt.Sscan(d.probe(tc.ref, "time", tc.url), &bytes, &secs)
			t.Logf("download %d MiB, %s: %.2f s, %.1f MiB/s", bytes>>20, tc.what, secs, float64(bytes)/secs/(1<<20))
		}
	}

	// The audit log records each create's policy.
	want := map[string]string{a: "allowlist[example.test 198.51.100.10/32:8080]", b: "open", c: "none"}
	for id, policy := range want {
		found := false
		for _, e := range d.audit(id) {
			if e.Action == "create" {
				found = true
				if e.Args["network"] != policy {
					t.Errorf("audit create of %s: network %v, want %q", id, e.Args["network"], policy)
				}
			}
		}
		if !found {
			t.Errorf("no audit create entry for %s", id)
		}
	}

	// A daemon killed and started again adopts the sandboxes' networks:
	// the rules stay in the kernel, the egress service starts again.
	d.Kill9()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	if got := d.probe(a, "get", "https://example.test/payload"); got != string(payload) {
		t.Errorf("netA after a daemon restart: https://example.test/payload: %d bytes, want the %d-byte payload", len(got), len(payload))
	}
	d.expectProbe(a, "timeout\n", "connect", gB, "9000")
	d.expectProbe(b, "outside 198.51.100.10:8081\n", "get", "http://198.51.100.10:8081/")

	// A daemon stopped with sandboxes left running keeps its table (their
	// rules) and says why; the next one adopts them.
	if code := d.Terminate(); code != 0 {
		t.Fatalf("agentbox serve exited with %d after SIGTERM, want 0", code)
	}
	if !nftTableExists(t, table) || !strings.Contains(d.Log.String(), `msg="keeping the network table`) {
		t.Errorf("a daemon stopped with sandboxes running: table %s exists %v; want it kept, with the reason in the log", table, nftTableExists(t, table))
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	d.expectProbe(b, "outside 198.51.100.10:8081\n", "get", "http://198.51.100.10:8081/")

	// Removing a sandbox removes its tap and rules at once.
	d.call("DELETE", "/v1/sandboxes/"+a+"?force=true", nil, http.StatusNoContent)
	if _, err := netlink.LinkByName("abx" + a); err == nil {
		t.Errorf("tap abx%s is left after the sandbox was removed", a)
	}
}

// imageDir is the test image directory.
func imageDir(t *testing.T) string { return testenv.Image(t) }

// TestNetworkRunLocal: an in-process `run --local` gets the same network:
// host:PORT reaches the host's loopback port as host.agentbox.internal,
// nothing else of the host; nothing is left afterwards.
func TestNetworkRunLocal(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "network tests need root (taps, nftables)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen", err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host loopback %s\n", r.URL.Path)
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	t.Cleanup(func() { deleteTable(t, "agentbox_run") })

	r := run(t, runOpts{flags: []string{"--local", "--boot-timeout", "180s", "--network", "allowlist", "--allow", "host:" + port}},
		"python3", "-c", probePy, "get", "http://host.agentbox.internal:"+port+"/x")
	expect(t, r, 0, "host loopback /x\n", "")
	// The forwarder serves only that port: another loopback port of the
	// host, where the same server would answer, is not there.
	r = run(t, runOpts{flags: []string{"--local", "--boot-timeout", "180s", "--network", "allowlist", "--allow", "host:" + port}},
		"sh", "-c", "python3 -c \"$0\" resolve host.agentbox.internal && python3 -c \"$0\" connect host.agentbox.internal 22", probePy)
	if lines := strings.Split(string(r.stdout), "\n"); r.code != 0 || len(lines) != 3 || lines[1] != "timeout" {
		t.Errorf("run --local: exit %d, stdout %q; want the gateway's address, then timeout", r.code, r.stdout)
	}

	// Without --network the image's default policy (manifest [network],
	// written from a profile's agentbox.guest.network) applies.
	img := withNetworkDefault(t, imageDir(t), "policy = \"allowlist\"\nallow = [\"host:"+port+"\"]\n")
	r = run(t, runOpts{flags: []string{"--image", img, "--local", "--boot-timeout", "180s"}},
		"python3", "-c", probePy, "get", "http://host.agentbox.internal:"+port+"/default")
	expect(t, r, 0, "host loopback /default\n", "")
}

// withNetworkDefault returns an image directory that is img with a
// [network] table (body given) added to its manifest: the other files are
// symlinks to img's.
func withNetworkDefault(t *testing.T, img, body string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"vmlinuz", "initrd.img", "rootfs.qcow2"} {
		must(t, "symlink", os.Symlink(filepath.Join(img, f), filepath.Join(dir, f)))
	}
	m, err := os.ReadFile(filepath.Join(img, "manifest.toml"))
	must(t, "read manifest", err)
	out := strings.Replace(string(m), "[sha256]", "[network]\n"+body+"[sha256]", 1)
	if out == string(m) {
		t.Fatalf("manifest of %s has no [sha256] table", img)
	}
	must(t, "write manifest", os.WriteFile(filepath.Join(dir, "manifest.toml"), []byte(out), 0o644))
	return dir
}
