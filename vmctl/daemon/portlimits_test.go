package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stillFree fails t unless addr can be listened on: nothing was left
// listening there.
func stillFree(t *testing.T, addr string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s is taken after a refused forward: %v", addr, err)
	}
	l.Close()
}

// TestCheckForward: a tenant forwards only to loopback ports >= 1024 (or
// 0); nobody to the daemon's listeners, nor off loopback to the egress
// ports; the admin may bind any other address and port. Each refusal is
// exact: category, API status and code, message naming the limit.
func TestCheckForward(t *testing.T) {
	reg, err := tenant.NewRegistry([]*tenant.Tenant{{Name: "a"}, {Name: "g", Grants: tenant.Grants{HostPorts: []int{5432}}}}, [][32]byte{{1}, {2}})
	if err != nil {
		t.Fatal(err)
	}
	s := &portsService{core: &core{cfg: Config{ReservedPorts: []int{7070}, Tenants: reg}}}
	a, _ := reg.Get("a")
	tenantMsg := func(addr string) string {
		return "host address " + addr + ": tenants may forward only to loopback ports >= 1024 (127.0.0.1:PORT, [::1]:PORT, or port 0 for a free one); ask the operator for host ports"
	}
	for _, tc := range []struct {
		who    *tenant.Tenant
		addr   string
		status int
		code   string
		msg    string
	}{
		{a, "0.0.0.0:443", 403, api.CodePermissionDenied, tenantMsg("0.0.0.0:443")},
		{a, "0.0.0.0:8080", 403, api.CodePermissionDenied, tenantMsg("0.0.0.0:8080")},
		{a, "[::]:8080", 403, api.CodePermissionDenied, tenantMsg("[::]:8080")},
		{a, "127.0.0.1:80", 403, api.CodePermissionDenied, tenantMsg("127.0.0.1:80")},
		{a, "127.0.0.1:1023", 403, api.CodePermissionDenied, tenantMsg("127.0.0.1:1023")},
		{a, "127.0.0.1:7070", 409, api.CodeConflict, "host address 127.0.0.1:7070: port 7070 is one of the daemon's own listeners ([7070]): choose another port, or leave the port out for a free one"},
		{a, "127.0.0.1:5432", 403, api.CodePermissionDenied, "host address 127.0.0.1:5432: port 5432 is a host port the operator grants to tenants' sandboxes (host_ports): tenants may not forward it; choose another port, or leave the port out for a free one"},
		{nil, "0.0.0.0:7070", 409, api.CodeConflict, "host address 0.0.0.0:7070: port 7070 is one of the daemon's own listeners ([7070]): choose another port, or leave the port out for a free one"},
		{nil, "0.0.0.0:443", 409, api.CodeConflict, "host address 0.0.0.0:443: port 443 off loopback is the sandboxes' egress port ([53 80 443] on every tap): bind it on 127.0.0.1, or choose another port"},
		{nil, "[::]:53", 409, api.CodeConflict, "host address [::]:53: port 53 off loopback is the sandboxes' egress port ([53 80 443] on every tap): bind it on 127.0.0.1, or choose another port"},
	} {
		err := s.checkForward(tc.who, tc.addr)
		e := api.ErrorFrom(err)
		if err == nil || e.Status != tc.status || e.Code != tc.code || e.Message != tc.msg {
			t.Errorf("checkForward(%v, %s) = %v (%d %s)\nwant %d %s %s", tc.who, tc.addr, err, e.Status, e.Code, tc.status, tc.code, tc.msg)
		}
		if tc.status == 403 && (!errors.Is(err, tenant.ErrNotGranted) || errdefs.Details(err)["tenant"] != "a") {
			t.Errorf("checkForward(%s): %v is not tenant.ErrNotGranted with min_port", tc.addr, err)
		}
	}
	for _, ok := range []struct {
		who  *tenant.Tenant
		addr string
	}{{a, "127.0.0.1:0"}, {a, "127.0.0.1:8080"}, {a, "[::1]:1024"}, {a, "127.0.0.2:65535"},
		{nil, "0.0.0.0:8080"}, {nil, "127.0.0.1:5432"}, {nil, "127.0.0.1:443"}, {nil, "127.0.0.1:22"}, {nil, "[::]:8443"}, {nil, "not an address"}} {
		if err := s.checkForward(ok.who, ok.addr); err != nil {
			t.Errorf("checkForward(%v, %s): %v", ok.who, ok.addr, err)
		}
	}
}

// TestForwardLimit: a tenant's sandbox holds at most max_port_forwards
// forwards (16 when absent); the next is refused with 429 tenant_quota
// naming the numbers before anything listens, and the table is as
// before; the admin's forward on the same sandbox opens.
func TestForwardLimit(t *testing.T) {
	s := &portsService{core: &core{}}
	id := "0123456789ab"
	b := &box{sb: &sandbox.Sandbox{ID: id}, life: context.Background()}
	s.ports.m = map[string]map[int]*portEntry{id: {}}
	for p := range tenant.DefaultMaxPortForwards {
		s.ports.m[id][8000+p] = &portEntry{rec: sandbox.PortForward{GuestPort: 8000 + p}}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	a := &tenant.Tenant{Name: "a"}
	_, err := s.openPort(b, sandbox.PortForward{GuestPort: 9000, HostAddr: addr}, a)
	e := api.ErrorFrom(err)
	want := "tenant a: sandbox 0123456789ab has 16 of 16 port forwards; remove one (agentbox port rm 0123456789ab PORT) or raise max_port_forwards"
	if !errors.Is(err, tenant.ErrQuotaExceeded) || e.Status != 429 || e.Code != api.CodeTenantQuota || e.Message != want || e.Details["limit"] != 16 || e.Details["used"] != 16 {
		t.Fatalf("the 17th forward of a tenant: %v (%d %s %v)\nwant 429 tenant_quota %s", err, e.Status, e.Code, e.Details, want)
	}
	if len(s.ports.m[id]) != 16 {
		t.Fatalf("%d forwards after the refusal, want 16", len(s.ports.m[id]))
	}
	stillFree(t, addr)

	raised := &tenant.Tenant{Name: "r", Quota: tenant.Quota{MaxPortForwards: 17}}
	if _, err := s.openPort(b, sandbox.PortForward{GuestPort: 9000, HostAddr: addr}, raised); err != nil {
		t.Fatalf("the 17th forward with max_port_forwards 17: %v", err)
	}
	e17 := s.ports.m[id][9000]
	e17.fwd.Close()
	delete(s.ports.m[id], 9000)

	en, err := s.openPort(b, sandbox.PortForward{GuestPort: 9001, HostAddr: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatalf("the admin's 17th forward: %v", err)
	}
	en.fwd.Close()
}

// TestCheckSnapshotQuota: the check after a save (whose size is known
// only then) refuses a snapshot that would take the tenant over
// max_snapshot_mib, naming its size and the others'; one that fits, and
// a tenant without limits, pass.
func TestCheckSnapshotQuota(t *testing.T) {
	b := &tenant.Tenant{Name: "b", Quota: tenant.Quota{MaxSnapshots: 2, MaxSnapshotMiB: 10}}
	err := checkSnapshotQuota(b, 1, 6<<20, 5<<20)
	e := api.ErrorFrom(err)
	want := "tenant b: the snapshot takes 5 MiB (5242880 bytes) and its others 6 of 10 MiB (6291456 of 10485760 bytes): it was removed again; remove some (agentbox snapshot rm NAME) or raise max_snapshot_mib"
	if !errors.Is(err, tenant.ErrQuotaExceeded) || e.Status != 429 || e.Code != api.CodeTenantQuota || e.Message != want || e.Details["asked"] != int64(5<<20) {
		t.Fatalf("a save over max_snapshot_mib: %v (%d %s %v)\nwant %s", err, e.Status, e.Code, e.Details, want)
	}
	for _, ok := range []struct {
		count      int
		used, made int64
	}{{1, 6 << 20, 4 << 20}, {1, 6 << 20, 0}, {0, 0, 10 << 20}} {
		if err := checkSnapshotQuota(b, ok.count, ok.used, ok.made); err != nil {
			t.Errorf("checkSnapshotQuota(%d, %d, %d): %v", ok.count, ok.used, ok.made, err)
		}
	}
	if err := checkSnapshotQuota(b, 2, 0, 0); err == nil || err.Error() != "tenant b: 2 of 2 snapshots kept; remove one (agentbox snapshot rm NAME) or raise max_snapshots" {
		t.Errorf("a third snapshot: %v", err)
	}
	if err := checkSnapshotQuota(&tenant.Tenant{Name: "free"}, 1000, 1<<40, 1<<40); err != nil {
		t.Errorf("no snapshot quota: %v", err)
	}
}
