package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// count returns how many items of kind ("sandboxes", "snapshots") the
// caller of token lists.
func (td *tenantDaemon) count(t *testing.T, token, kind string) int {
	t.Helper()
	a := td.do(t, token, "GET", "/v1/"+kind, "")
	var m map[string][]json.RawMessage
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("list %s: %v: %d %s", kind, err, a.status, a.body)
	}
	return len(m[kind])
}

// errorOf decodes an error answer.
func errorOf(t *testing.T, a answer) api.ErrorResponse {
	t.Helper()
	var e api.ErrorResponse
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("not an error answer: %v: %d %s", err, a.status, a.body)
	}
	return e
}

// TestTenantHostPorts: a tenant's network policy has only the host:PORT
// rules its host_ports grant: another is refused with 403
// permission_denied naming the port and the grant, before anything is
// made; a granted port and the admin's any port pass that check (and fail
// later here, where no network is served).
func TestTenantHostPorts(t *testing.T) {
	img := testenv.Image(t)
	td := newTenantDaemonWith(t, "", "host_ports = [6000, 6001]", nil)
	body := func(allow string) string {
		return fmt.Sprintf(`{"image":%q,"accel":"tcg","network":{"mode":"allowlist","allow":[%q]}}`, img, allow)
	}
	a := td.do(t, tokenB, "POST", "/v1/sandboxes", body("host:5432"))
	e := errorOf(t, a)
	want := "tenant b may not expose the host's port 5432 (--allow host:5432): tenants reach only the host ports the operator grants in the tenants file's host_ports (granted: [6000 6001]); ask the operator for host ports"
	if a.status != 403 || e.Error.Code != api.CodePermissionDenied || e.Error.Message != want || e.Error.Details["host_port"] != float64(5432) {
		t.Fatalf("b's host:5432: %d %s\nwant 403 permission_denied %s", a.status, a.body, want)
	}
	if n := td.count(t, tokenB, "sandboxes"); n != 1 {
		t.Fatalf("b lists %d sandboxes after the refusal, want its 1", n)
	}
	// Also as an open network's only rule, and among granted ones.
	a = td.do(t, tokenB, "POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"accel":"tcg","network":{"mode":"open","allow":["host:6000","host:22"]}}`, img))
	if a.status != 403 || !strings.Contains(a.body, "may not expose the host's port 22 ") {
		t.Fatalf("b's open network with host:22: %d %s", a.status, a.body)
	}
	for _, tc := range []struct{ token, allow string }{{tokenB, "host:6000"}, {adminToken, "host:5432"}} {
		a := td.do(t, tc.token, "POST", "/v1/sandboxes", body(tc.allow))
		if a.status == 403 || strings.Contains(a.body, "host_ports") {
			t.Errorf("%s by %s: %d %s, refused for its host port", tc.allow, tc.token, a.status, a.body)
		}
	}
	if n := td.count(t, adminToken, "sandboxes"); n != 3 {
		t.Fatalf("the admin lists %d sandboxes, want the 3 found at start", n)
	}
}

// TestTenantSnapshotQuota: max_snapshots and max_snapshot_mib hold a
// tenant's snapshots: a save over either is refused with 429
// tenant_quota naming the numbers, before anything is saved; the admin
// has no snapshot quota (its save fails here only because nothing runs).
func TestTenantSnapshotQuota(t *testing.T) {
	now := time.Now().UTC()
	snapB := sandbox.SnapshotRecord{ID: "e00000000002", Name: "snapb", Tag: "se00000000002", SandboxID: idB, SandboxName: "sbb", Tenant: "b",
		File: filepath.Join(t.TempDir(), "none.qcow2"), VCPUs: 1, MemoryMiB: 256, CreatedAt: now, VMStateBytes: 1 << 20, DiskBytes: 3<<20 + 5}
	td := newTenantDaemonWith(t, "max_snapshots = 1", "max_snapshots = 5\nmax_snapshot_mib = 3", []sandbox.SnapshotRecord{snapB})
	for _, tc := range []struct {
		token, ref, msg string
		details         map[string]any
	}{
		{tokenA, "sba", "tenant a: 1 of 1 snapshots kept; remove one (agentbox snapshot rm NAME) or raise max_snapshots",
			map[string]any{"tenant": "a", "resource": "snapshots", "used": float64(1), "limit": float64(1), "asked": float64(1)}},
		{tokenB, "sbb", "tenant b: its snapshots take 4 of 3 MiB (3145733 of 3145728 bytes); remove some (agentbox snapshot rm NAME) or raise max_snapshot_mib",
			map[string]any{"tenant": "b", "resource": "snapshot_bytes", "used": float64(3<<20 + 5), "limit": float64(3 << 20), "asked": float64(0)}},
	} {
		a := td.do(t, tc.token, "POST", "/v1/sandboxes/"+tc.ref+"/snapshots", `{"name":"more"}`)
		e := errorOf(t, a)
		if a.status != 429 || e.Error.Code != api.CodeTenantQuota || e.Error.Message != tc.msg || fmt.Sprint(e.Error.Details) != fmt.Sprint(tc.details) {
			t.Errorf("save of %s: %d %s\nwant 429 tenant_quota %s %v", tc.ref, a.status, a.body, tc.msg, tc.details)
		}
		if n := td.count(t, tc.token, "snapshots"); n != 1 {
			t.Errorf("%d snapshots listed after the refusal, want 1", n)
		}
	}
	a := td.do(t, adminToken, "POST", "/v1/sandboxes/sbadmin/snapshots", `{"name":"more"}`)
	if a.status == 429 || a.status == 201 {
		t.Fatalf("the admin's save of a stopped sandbox: %d %s, want the manager's refusal", a.status, a.body)
	}
}

// nodesCluster is a cluster of two nodes with advertise URLs that counts
// drains and placements.
type nodesCluster struct {
	fakeCluster
	drains int
}

func (c *nodesCluster) ListNodes(ctx context.Context) ([]api.Node, error) {
	return []api.Node{{Name: "h1", Advertise: "http://10.0.0.1:7070", State: "up"}, {Name: "h2", Advertise: "http://10.0.0.2:7070", State: "up"}}, nil
}

func (c *nodesCluster) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	c.drains++
	return api.Node{Name: name, State: "draining"}, nil
}

// TestTenantNodes: in a cluster a tenant lists the nodes without their
// advertise URLs and may not drain or undrain one (403 naming the
// operator); the admin sees the URLs and drains. A tenant's create with
// an ungranted host port is refused before it is queued.
func TestTenantNodes(t *testing.T) {
	td := newTenantDaemon(t)
	cl := &nodesCluster{}
	td.d.SetCluster(cl)
	a := td.do(t, tokenA, "GET", "/v1/nodes", "")
	if a.status != 200 || a.body != `{"nodes":[{"name":"h1","state":"up","capacity":{"memory_mib":0,"vcpus":0,"used_memory_mib":0,"used_vcpus":0},"sandboxes":0,"last_seen":"0001-01-01T00:00:00Z","version":""},{"name":"h2","state":"up","capacity":{"memory_mib":0,"vcpus":0,"used_memory_mib":0,"used_vcpus":0},"sandboxes":0,"last_seen":"0001-01-01T00:00:00Z","version":""}]}` {
		t.Errorf("a's node list: %d %s", a.status, a.body)
	}
	if a := td.do(t, adminToken, "GET", "/v1/nodes", ""); a.status != 200 || strings.Count(a.body, `"advertise":"http://10.0.0.`) != 2 {
		t.Errorf("the admin's node list: %d %s", a.status, a.body)
	}
	for verb, msg := range map[string]string{"drain": "draining a node is the operator's: tenant a may not; ask the operator", "undrain": "undraining a node is the operator's: tenant a may not; ask the operator"} {
		a := td.do(t, tokenA, "POST", "/v1/nodes/h1/"+verb, "")
		if e := errorOf(t, a); a.status != 403 || e.Error.Code != api.CodePermissionDenied || e.Error.Message != msg {
			t.Errorf("a's %s: %d %s, want 403 %s", verb, a.status, a.body, msg)
		}
	}
	if cl.drains != 0 {
		t.Fatalf("a tenant's drain reached the cluster (%d)", cl.drains)
	}
	if a := td.do(t, adminToken, "POST", "/v1/nodes/h1/drain", ""); a.status != 200 || cl.drains != 1 {
		t.Errorf("the admin's drain: %d %s, %d drains", a.status, a.body, cl.drains)
	}
	a = td.do(t, tokenB, "POST", "/v1/sandboxes", `{"image":"/images/x","network":{"mode":"allowlist","allow":["host:4222"]}}`)
	if a.status != 403 || !strings.Contains(a.body, "may not expose the host's port 4222") || len(cl.placed) != 0 {
		t.Errorf("b's queued create with host:4222: %d %s, %d placed", a.status, a.body, len(cl.placed))
	}
}

// denyAll denies every request and records the identities it was asked
// about.
type denyAll struct {
	mu  sync.Mutex
	ids []policy.Identity
}

func (p *denyAll) Check(ctx context.Context, req policy.Request) (policy.Decision, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, req.Identity)
	return policy.Decision{Verdict: policy.Deny, Reason: "recorded"}, nil
}

// TestPolicySeesTenant: the policy is told the tenant a request acts
// for, whichever front it came through (REST's "tenant:NAME" caller, the
// E2B front's "e2b", MCP's session); the admin's requests carry none.
func TestPolicySeesTenant(t *testing.T) {
	img := testenv.Image(t)
	state := t.TempDir()
	p := &denyAll{}
	d, err := daemon.New(t.Context(), daemon.Config{Driver: noDomains{}, StateDir: state, RuntimeDir: testenv.ShortTempDir(t),
		ImageVerifyCacheDir: filepath.Join(state, "verify"), Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	a := &tenant.Tenant{Name: "a"}
	for _, c := range []struct {
		caller string
		t      *tenant.Tenant
	}{{"tenant:a", a}, {"e2b", a}, {"token", nil}, {"e2b", nil}} {
		ctx := tenant.With(api.WithCaller(context.Background(), api.Caller{ID: c.caller}), c.t)
		if _, err := d.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img, Accel: "tcg"}); api.ErrorFrom(err).Code != api.CodePolicyDenied {
			t.Fatalf("create by %s: %v, want the policy's denial", c.caller, err)
		}
	}
	var got []string
	for _, id := range p.ids {
		got = append(got, id.Caller+"/"+id.Tenant)
	}
	if want := "[tenant:a/a e2b/a token/ e2b/]"; fmt.Sprint(got) != want {
		t.Fatalf("the policy saw %v, want %s", got, want)
	}
}

// TestTenantWarmList: a tenant lists the shared warm templates and its
// own, never another tenant's own; the admin lists them all.
func TestTenantWarmList(t *testing.T) {
	td := newTenantDaemon(t)
	for key, group := range map[string]string{"aaaaaaaaaaaaaaaaaaaaaaaa": "", "bbbbbbbbbbbbbbbbbbbbbbbb": "tenant:a", "cccccccccccccccccccccccc": "tenant:b"} {
		dir := mkdir(t, filepath.Join(td.stateDir, "warm", key))
		man := fmt.Sprintf(`{"key":%q,"group":%q,"source":{"image_name":"img"}}`, key, group)
		if err := os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(man), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for tok, want := range map[string]string{tokenA: "[aaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbbbbb]", tokenB: "[aaaaaaaaaaaaaaaaaaaaaaaa cccccccccccccccccccccccc]",
		adminToken: "[aaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbbbbb cccccccccccccccccccccccc]"} {
		a := td.do(t, tok, "GET", "/v1/warm", "")
		var list struct {
			Templates []api.WarmTemplate `json:"templates"`
		}
		if err := json.Unmarshal([]byte(a.body), &list); err != nil {
			t.Fatalf("warm list: %v: %d %s", err, a.status, a.body)
		}
		var keys []string
		for _, w := range list.Templates {
			keys = append(keys, w.Key)
		}
		slices.Sort(keys)
		if fmt.Sprint(keys) != want {
			t.Errorf("warm list with %s: %v, want %s (%s)", tok, keys, want, a.body)
		}
	}
}
