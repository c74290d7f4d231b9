package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
)

// netFlags are the serve flags that give a test's daemon networking of
// its own: the nftables table PREFIX<pid> and the address pool
// 10.OCTET.N.0/24 (N from the pid); tests that may run at once differ in
// octet or prefix. It registers the table's removal, so call it before
// newDaemon: the removal then runs after the daemon's cleanup.
func netFlags(t *testing.T, octet byte, prefix string) []string {
	n := os.Getpid()%200 + 1
	pool := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, octet, byte(n), 0}), 24)
	table := fmt.Sprintf("%s%d", prefix, os.Getpid())
	t.Cleanup(func() { deleteTable(t, table) })
	return []string{"--network-table", table, "--network-pool", pool.String()}
}

// hostHello is what helloServer answers.
const hostHello = "hello from the host"

// helloServer serves hostHello on this host's loopback for the test's
// life. It returns the port (for an allowlist rule "host:PORT") and the
// guest command that prints the answer, fetched through
// host.agentbox.internal.
func helloServer(t *testing.T) (port int, fetch []string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "listen on loopback", err)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, hostHello) }))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	port = ln.Addr().(*net.TCPAddr).Port
	return port, []string{"python3", "-c", fmt.Sprintf(`import urllib.request; print(urllib.request.urlopen("http://host.agentbox.internal:%d/", timeout=30).read().decode())`, port)}
}
