package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestSnapshotRestoreNetwork: a sandbox restored from a snapshot of a
// sandbox with a network gets its own tap and addresses, keeps its
// source's MAC — the guest NIC's saved state — and `inspect` shows the
// MAC the guest really has; its network works (a host:PORT rule reaches
// a server on this host's loopback).
func TestSnapshotRestoreNetwork(t *testing.T) {
	port, fetch := helloServer(t)
	d := newDaemon(t, netFlags(t, 214, "abxsnap")...)
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	src := d.create(createBody(t, fmt.Sprintf(`"name":"netsrc","memory_mib":256,"boot_timeout_ms":180000,"network":{"mode":"allowlist","allow":["host:%d"]}`, port)))
	if got := strings.TrimSpace(d.out(src.ID, fetch...)); got != hostHello {
		t.Fatalf("source: fetch from the host gave %q", got)
	}
	d.save("netsrc", "netcp")
	fork := d.restore("netcp", `{"name":"netfork"}`)

	ns, nf := d.network(src.ID), d.network(fork.ID)
	if nf.Mode != "allowlist" || nf.Tap != "abx"+fork.ID || nf.Tap == ns.Tap || nf.Address == ns.Address || nf.MAC != ns.MAC || nf.MAC == "" {
		t.Errorf("fork network %+v (source %+v); want its own tap and address, the source's MAC", nf, ns)
	}
	// The MAC the guest NIC really has (its only NIC besides lo).
	mac := strings.TrimSpace(d.out(fork.ID, "sh", "-c", "for i in /sys/class/net/*; do [ ${i##*/} = lo ] || cat $i/address; done"))
	if mac != nf.MAC {
		t.Errorf("the fork's guest NIC has MAC %q; inspect shows %q", mac, nf.MAC)
	}
	if got := strings.TrimSpace(d.out(fork.ID, fetch...)); got != hostHello {
		t.Errorf("fork: fetch from the host gave %q", got)
	}
	d.call("DELETE", "/v1/snapshots/netcp", nil, http.StatusNoContent)
}
