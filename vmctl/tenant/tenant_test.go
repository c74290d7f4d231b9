package tenant_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

const (
	tokA = "token-of-tenant-a-0123456789"
	tokB = "token-of-tenant-b-0123456789"
)

func file(body string) []byte { return []byte(body) }

func TestParseAndLookup(t *testing.T) {
	r, err := tenant.Parse(file(`
[[tenant]]
name = "a"
token_sha256 = "` + tenant.HashToken(tokA+"\n") + `"
max_sandboxes = 3
max_vcpus = 8
max_memory_mib = 4096
max_priority = "high"

[[tenant]]
name = "b"
token_sha256 = "` + strings.ToUpper(tenant.HashToken(tokB)) + `"
`))
	if err != nil {
		t.Fatal(err)
	}
	a, ok := r.Lookup(tokA)
	if !ok || a.Name != "a" || a.Quota != (tenant.Quota{MaxSandboxes: 3, MaxVCPUs: 8, MaxMemoryMiB: 4096, MaxPriority: "high"}) {
		t.Fatalf("Lookup(tokA) = %+v, %v", a, ok)
	}
	if b, ok := r.Lookup(tokB); !ok || b.Name != "b" || b.Quota != (tenant.Quota{}) {
		t.Fatalf("Lookup(tokB) = %+v, %v", b, ok)
	}
	for _, bad := range []string{"", "token-of-tenant-c-0123456789", tokA + "x", tenant.HashToken(tokA)} {
		if got, ok := r.Lookup(bad); ok {
			t.Errorf("Lookup(%q) = %v, want no tenant", bad, got.Name)
		}
	}
	if got := len(r.Tenants()); got != 2 {
		t.Errorf("Tenants: %d, want 2", got)
	}
	if g, ok := r.Get("b"); !ok || g.Name != "b" {
		t.Errorf("Get(b) = %v, %v", g, ok)
	}
	if got := tenant.HashToken("abc"); got != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Errorf("HashToken(abc) = %s", got)
	}
}

func TestParseErrors(t *testing.T) {
	h := tenant.HashToken(tokA)
	for _, tc := range []struct{ body, want string }{
		{``, "no [[tenant]]"},
		{`[[tenant]]` + "\n" + `token_sha256 = "` + h + `"`, "tenant has no name"},
		{`[[tenant]]` + "\n" + `name = "a b"` + "\n" + `token_sha256 = "` + h + `"`, `tenant name "a b" is invalid`},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "xyz"`, `tenant "a": token_sha256 "xyz" is not 64 hex digits`},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "` + h[:62] + `"`, "is not 64 hex digits"},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "` + h + `"` + "\n[[tenant]]\nname = \"a\"\ntoken_sha256 = \"" + tenant.HashToken(tokB) + `"`, `tenant "a" is named twice`},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "` + h + `"` + "\n[[tenant]]\nname = \"b\"\ntoken_sha256 = \"" + strings.ToUpper(h) + `"`, `tenants "a" and "b" have the same token_sha256`},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "` + h + `"` + "\nmax_vcpus = -1", "max_vcpus -1 is negative"},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token_sha256 = "` + h + `"` + "\nmax_priority = \"urgent\"", `max_priority "urgent" is not one of low, normal, high`},
		{`[[tenant]]` + "\n" + `name = "a"` + "\n" + `token = "` + h + `"`, "unknown keys tenant.token"},
		{`[[tenant]` + "\n", "toml"},
	} {
		_, err := tenant.Parse(file(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.body, err, tc.want)
		}
	}
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tenants.toml")
	if _, err := tenant.Load(p); err == nil || !strings.Contains(err.Error(), "tenants file") {
		t.Fatalf("Load of a missing file: %v", err)
	}
	os.WriteFile(p, []byte("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"00\"\n"), 0o600)
	if _, err := tenant.Load(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("Load of a bad file: %v, want its path", err)
	}
}

func TestContext(t *testing.T) {
	ctx := context.Background()
	if _, ok := tenant.From(ctx); ok || tenant.Name(ctx) != "" || !tenant.Sees(ctx, "a") || !tenant.Sees(ctx, "") {
		t.Fatal("a context without tenant is not the admin's")
	}
	a := &tenant.Tenant{Name: "a"}
	ctx = tenant.With(ctx, a)
	if got, ok := tenant.From(ctx); !ok || got != a || tenant.Name(ctx) != "a" {
		t.Fatalf("From = %v, %v", got, ok)
	}
	if !tenant.Sees(ctx, "a") || tenant.Sees(ctx, "b") || tenant.Sees(ctx, "") {
		t.Fatal("tenant a sees what is not its own")
	}
	if _, ok := tenant.From(tenant.With(ctx, nil)); ok {
		t.Fatal("With(nil) is not the admin")
	}
}

func TestCheckPriority(t *testing.T) {
	n := &tenant.Tenant{Name: "n"}
	if err := n.CheckPriority(""); err != nil {
		t.Fatal(err)
	}
	if err := n.CheckPriority(api.PriorityLow); err != nil {
		t.Fatal(err)
	}
	err := n.CheckPriority(api.PriorityHigh)
	if !errors.Is(err, tenant.ErrPriority) || !errors.Is(err, errdefs.ErrPermissionDenied) || err.Error() != "tenant n may create at priority normal at most, asked high: ask for normal or lower, or raise its max_priority" {
		t.Fatalf("CheckPriority(high) = %v", err)
	}
	if e := api.ErrorFrom(err); e.Status != 403 {
		t.Fatalf("status %d", e.Status)
	}
	var admin *tenant.Tenant
	if err := admin.CheckPriority(api.PriorityHigh); err != nil {
		t.Fatal(err)
	}
}

func TestCheckMessages(t *testing.T) {
	a := &tenant.Tenant{Name: "a", Quota: tenant.Quota{MaxSandboxes: 3, MaxVCPUs: 4, MaxMemoryMiB: 1024}}
	for _, tc := range []struct {
		used, asked tenant.Usage
		want        string
	}{
		{tenant.Usage{3, 3, 768}, tenant.Usage{1, 1, 256}, "tenant a: 3 of 3 sandboxes in use; remove one or raise max_sandboxes"},
		{tenant.Usage{1, 3, 256}, tenant.Usage{1, 2, 256}, "tenant a: 3 of 4 vCPUs in use, the sandbox asks 2; remove sandboxes, ask for less, or raise max_vcpus"},
		{tenant.Usage{1, 1, 1000}, tenant.Usage{1, 1, 256}, "tenant a: 1000 of 1024 MiB of memory in use, the sandbox asks 256; remove sandboxes, ask for less, or raise max_memory_mib"},
	} {
		err := tenant.Check(a, tc.used, tc.asked)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Check(%v, %v) = %v, want %q", tc.used, tc.asked, err, tc.want)
			continue
		}
		e := api.ErrorFrom(err)
		if e.Status != 429 || e.Code != api.CodeTenantQuota || e.Details["tenant"] != "a" {
			t.Errorf("answered %d %s %v", e.Status, e.Code, e.Details)
		}
	}
	if err := tenant.Check(a, tenant.Usage{2, 3, 768}, tenant.Usage{1, 1, 256}); err != nil {
		t.Errorf("a create that just fits: %v", err)
	}
	if err := tenant.Check(&tenant.Tenant{Name: "free"}, tenant.Usage{100, 100, 1 << 20}, tenant.Usage{1, 64, 1 << 20}); err != nil {
		t.Errorf("no quota: %v", err)
	}
}

// TestLocalStoreRace: 50 goroutines race for 3 slots; exactly 3 win, and
// after every release the tenant holds nothing.
func TestLocalStoreRace(t *testing.T) {
	s := tenant.NewLocalStore()
	a := &tenant.Tenant{Name: "a", Quota: tenant.Quota{MaxSandboxes: 3}}
	var won, refused atomic.Int32
	var mu sync.Mutex
	var releases []func()
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			<-start
			rel, err := s.Reserve(context.Background(), a, tenant.Usage{Sandboxes: 1, VCPUs: 1, MemoryMiB: 256})
			if err != nil {
				if !errors.Is(err, tenant.ErrQuotaExceeded) {
					t.Errorf("Reserve: %v", err)
				}
				refused.Add(1)
				return
			}
			won.Add(1)
			mu.Lock()
			releases = append(releases, rel)
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()
	if won.Load() != 3 || refused.Load() != 47 {
		t.Fatalf("%d reservations won, %d refused; want 3 and 47", won.Load(), refused.Load())
	}
	if got := s.Used("a"); got != (tenant.Usage{3, 3, 768}) {
		t.Fatalf("Used = %v", got)
	}
	for _, rel := range releases {
		rel()
		rel() // idempotent
	}
	if got := s.Used("a"); got != (tenant.Usage{}) {
		t.Fatalf("Used after the releases = %v", got)
	}
}

func TestLocalStoreHoldAndAdmin(t *testing.T) {
	s := tenant.NewLocalStore()
	a := &tenant.Tenant{Name: "a", Quota: tenant.Quota{MaxVCPUs: 2}}
	rel := s.Hold("a", tenant.Usage{1, 4, 512}) // over the quota: held anyway
	if _, err := s.Reserve(context.Background(), a, tenant.Usage{1, 1, 0}); !errors.Is(err, tenant.ErrQuotaExceeded) {
		t.Fatalf("Reserve over a held usage: %v", err)
	}
	rel()
	relA, err := s.Reserve(context.Background(), a, tenant.Usage{1, 2, 0})
	if err != nil {
		t.Fatal(err)
	}
	relA()
	relAdmin, err := s.Reserve(context.Background(), nil, tenant.Usage{100, 100, 100})
	if err != nil {
		t.Fatal(err)
	}
	relAdmin()
	s.Hold("", tenant.Usage{1, 1, 1})()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Reserve(ctx, a, tenant.Usage{1, 1, 0}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Reserve with a cancelled context: %v", err)
	}
}

// TestParseGrants: the snapshot and port-forward quotas and the grants
// (host_ports, share_templates) are read, ports sorted and unique; bad
// ones are refused naming the tenant and the key.
func TestParseGrants(t *testing.T) {
	h := tenant.HashToken(tokA)
	r, err := tenant.Parse(file(`[[tenant]]
name = "a"
token_sha256 = "` + h + `"
max_snapshots = 4
max_snapshot_mib = 2048
max_port_forwards = 3
host_ports = [6001, 5432, 6001]
share_templates = true
[[tenant]]
name = "b"
token_sha256 = "` + tenant.HashToken(tokB) + `"
`))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := r.Get("a")
	if a.Quota != (tenant.Quota{MaxSnapshots: 4, MaxSnapshotMiB: 2048, MaxPortForwards: 3}) || fmt.Sprint(a.Grants.HostPorts) != "[5432 6001]" || !a.Grants.ShareTemplates {
		t.Fatalf("a = %+v", a)
	}
	if a.Quota.PortForwards() != 3 || !a.AllowsHostPort(5432) || a.AllowsHostPort(22) || !a.SharesTemplates() {
		t.Fatalf("a's limits: %d forwards, 5432 %v, 22 %v, shares %v", a.Quota.PortForwards(), a.AllowsHostPort(5432), a.AllowsHostPort(22), a.SharesTemplates())
	}
	b, _ := r.Get("b")
	if b.Quota.PortForwards() != tenant.DefaultMaxPortForwards || b.AllowsHostPort(5432) || b.SharesTemplates() {
		t.Fatalf("b's defaults: %d forwards, 5432 %v, shares %v", b.Quota.PortForwards(), b.AllowsHostPort(5432), b.SharesTemplates())
	}
	err = b.CheckHostPorts([]uint16{5432})
	if !errors.Is(err, tenant.ErrNotGranted) || !errors.Is(err, errdefs.ErrPermissionDenied) || err.Error() != "tenant b may not expose the host's port 5432 (--allow host:5432): tenants reach only the host ports the operator grants in the tenants file's host_ports (granted: none); ask the operator for host ports" {
		t.Fatalf("b's host:5432: %v", err)
	}
	if err := a.CheckHostPorts([]uint16{5432, 6001}); err != nil {
		t.Fatalf("a's granted ports: %v", err)
	}
	var admin *tenant.Tenant
	if err := admin.CheckHostPorts([]uint16{22, 5432}); err != nil || !admin.SharesTemplates() || !admin.AllowsHostPort(1) {
		t.Fatalf("the admin: %v", err)
	}
	many := make([]string, tenant.MaxHostPorts+1)
	for i := range many {
		many[i] = fmt.Sprint(1000 + i)
	}
	for _, tc := range []struct{ more, want string }{
		{"max_snapshots = -1", `tenant "a": max_snapshots -1 is negative`},
		{"max_snapshot_mib = -5", `tenant "a": max_snapshot_mib -5 is negative`},
		{"max_port_forwards = -1", `tenant "a": max_port_forwards -1 is negative`},
		{"host_ports = [0]", `tenant "a": host_ports 0 is not a port 1..65535`},
		{"host_ports = [65536]", `tenant "a": host_ports 65536 is not a port 1..65535`},
		{"host_ports = [" + strings.Join(many, ",") + "]", `tenant "a": host_ports lists 257 ports: at most 256`},
	} {
		_, err := tenant.Parse(file("[[tenant]]\nname = \"a\"\ntoken_sha256 = \"" + h + "\"\n" + tc.more + "\n"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse with %s: %v, want %q", tc.more, err, tc.want)
		}
	}
}
