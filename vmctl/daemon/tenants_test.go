package daemon_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/store"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

const (
	adminToken = "admin-token-0123456789abcdef"
	tokenA     = "tenant-a-token-0123456789abcdef"
	tokenB     = "tenant-b-token-0123456789abcdef"
	idA        = "a00000000001"
	idB        = "b00000000001"
	idAdmin    = "c00000000001"
	missing    = "d00000000009"
	missingNm  = "nosuchbox"
)

// tenantDaemon is a daemon (without domains) serving the API on TCP with
// tenants a (max 1 sandbox) and b, and three stopped sandboxes found in
// its store at start: sba (a's), sbb (b's), sbadmin (the admin's), and a
// snapshot of sba (snapa).
type tenantDaemon struct {
	url      string
	d        *daemon.Daemon
	stateDir string
}

func newTenantDaemon(t *testing.T) *tenantDaemon {
	t.Helper()
	return newTenantDaemonWith(t, "", "", nil)
}

// newTenantDaemonWith is newTenantDaemon with more keys in a's and b's
// [[tenant]] (TOML lines) and more snapshot records in the store.
func newTenantDaemonWith(t *testing.T, moreA, moreB string, snaps []sandbox.SnapshotRecord) *tenantDaemon {
	t.Helper()
	dir := t.TempDir()
	stateDir := filepath.Join(dir, "state")
	st, err := store.Open(filepath.Join(mkdir(t, stateDir), "state.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, r := range []sandbox.Record{
		{ID: idA, Name: "sba", Tenant: "a", VCPUs: 1, MemoryMiB: 256},
		{ID: idB, Name: "sbb", Tenant: "b", VCPUs: 1, MemoryMiB: 256},
		{ID: idAdmin, Name: "sbadmin", VCPUs: 1, MemoryMiB: 256},
	} {
		r.State, r.Domain, r.CreatedAt, r.StoppedAt = sandbox.StateStopped, "agentbox-"+r.ID, now, now
		if err := st.PutSandbox(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range append([]sandbox.SnapshotRecord{{ID: "e00000000001", Name: "snapa", Tag: "se00000000001", SandboxID: idA, SandboxName: "sba", Tenant: "a", File: filepath.Join(dir, "none.qcow2"), ImageDir: filepath.Join(dir, "noimage"), VCPUs: 1, MemoryMiB: 256, CreatedAt: now}}, snaps...) {
		if err := st.PutSnapshot(r); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	reg, err := tenant.Parse([]byte(fmt.Sprintf("[[tenant]]\nname = \"a\"\ntoken_sha256 = %q\nmax_sandboxes = 1\n%s\n[[tenant]]\nname = \"b\"\ntoken_sha256 = %q\nmax_sandboxes = 2\n%s\n",
		tenant.HashToken(tokenA), moreA, tenant.HashToken(tokenB), moreB)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(context.Background(), daemon.Config{
		Driver: noDomains{}, StateDir: stateDir, RuntimeDir: mkdir(t, filepath.Join(dir, "run")), Tenants: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: d, Token: adminToken, Tenants: reg})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		d.Shutdown(ctx)
	})
	return &tenantDaemon{url: "http://" + l.Addr().String(), d: d, stateDir: stateDir}
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
	return p
}

// answer is an HTTP answer, or a WebSocket session's first message.
type answer struct {
	status int
	body   string
}

// do sends a request with token and returns the answer (the first line of
// a streamed one).
func (td *tenantDaemon) do(t *testing.T, token, method, path, body string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, td.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(io.LimitReader(resp.Body, 1<<20)).ReadString('\n')
	return answer{resp.StatusCode, strings.TrimSpace(line)}
}

// ws opens a WebSocket with token and returns its first message.
func (td *tenantDaemon) ws(t *testing.T, token, path string) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(td.url, "http")+path, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		if resp == nil {
			t.Fatalf("WebSocket %s: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, strings.TrimSpace(string(b))}
	}
	defer c.CloseNow()
	// The session waits for its start message (cmd) on exec/ws.
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"start","cmd":["true"]}`))
	_, msg, err := c.Read(ctx)
	if err != nil {
		return answer{101, "read: " + websocket.CloseStatus(err).String()}
	}
	return answer{101, string(msg)}
}

// sandboxRoute is one route with {id}, ready to send.
type sandboxRoute struct {
	method, path, body string
	ws                 bool
}

// sandboxRoutes are every API route with a sandbox in its path, for ref.
func sandboxRoutes(ref string) []sandboxRoute {
	bodies := map[string]string{
		"POST /v1/sandboxes/{id}/exec":                   `{"cmd":["true"]}`,
		"POST /v1/sandboxes/{id}/processes":              `{"cmd":["true"]}`,
		"POST /v1/sandboxes/{id}/processes/{pid}/kill":   `{"signal":"TERM"}`,
		"POST /v1/sandboxes/{id}/processes/{pid}/resize": `{"rows":24,"cols":80}`,
		"POST /v1/sandboxes/{id}/files/move":             `{"source":"/a","destination":"/b"}`,
		"POST /v1/sandboxes/{id}/files/mkdir":            `{"path":"/a"}`,
		"POST /v1/sandboxes/{id}/ports":                  `{"guest_port":8000}`,
		"POST /v1/sandboxes/{id}/snapshots":              `{"name":"s1"}`,
		"POST /v1/sandboxes/{id}/timeout":                `{"timeout_seconds":60}`,
		"POST /v1/sandboxes/{id}/pause":                  `{}`,
		"POST /v1/sandboxes/{id}/processes/{pid}/stdin":  `x`,
		"PUT /v1/sandboxes/{id}/files":                   `x`,
	}
	var out []sandboxRoute
	for _, rt := range apiserver.Routes() {
		if !strings.Contains(rt.Path, "{id}") {
			continue
		}
		p := strings.NewReplacer("{id}", ref, "{pid}", "p1", "{port}", "8000").Replace(rt.Path)
		if slices.Contains(rt.Query, "path") {
			p += "?path=/tmp/x"
		}
		out = append(out, sandboxRoute{rt.Method, p, bodies[rt.Method+" "+rt.Path], strings.HasSuffix(rt.Path, "/ws")})
	}
	return out
}

func (td *tenantDaemon) send(t *testing.T, token string, rt sandboxRoute) answer {
	if rt.ws {
		return td.ws(t, token, rt.path)
	}
	return td.do(t, token, rt.method, rt.path, rt.body)
}

// TestTenantSeesOnlyItsOwn: on every sandbox route (streams and
// WebSockets included), tenant b's answer for a's sandbox, by ID and by
// name, is exactly the admin's answer for a sandbox that does not exist;
// a itself and the admin get another answer.
func TestTenantSeesOnlyItsOwn(t *testing.T) {
	td := newTenantDaemon(t)
	for ref, absent := range map[string]string{idA: missing, "sba": missingNm} {
		want := sandboxRoutes(absent)
		for i, rt := range sandboxRoutes(ref) {
			gone := td.send(t, adminToken, want[i])
			gone.body = strings.ReplaceAll(gone.body, absent, ref)
			if got := td.send(t, tokenB, rt); got != gone {
				t.Errorf("tenant b, %s %s: %d %s\nwant what a missing sandbox gets: %d %s", rt.method, rt.path, got.status, got.body, gone.status, gone.body)
			}
			if gone.status != http.StatusNotFound && !strings.HasSuffix(rt.path, idA+"/audit") {
				t.Errorf("%s %s of a missing sandbox: %d %s, want 404", rt.method, rt.path, gone.status, gone.body)
			}
			if rt.method == "DELETE" && strings.HasSuffix(rt.path, "/sandboxes/"+ref) {
				continue // the owner's would remove it
			}
			for _, tok := range []string{tokenA, adminToken} {
				if got := td.send(t, tok, rt); got == gone || strings.Contains(got.body, `no sandbox \"`+ref) {
					t.Errorf("%s %s by its owner or the admin: %d %s, as if missing", rt.method, rt.path, got.status, got.body)
				}
			}
		}
	}

	// Lists: each tenant its own, the admin all.
	for _, tc := range []struct {
		token string
		want  []string
	}{{tokenA, []string{idA}}, {tokenB, []string{idB}}, {adminToken, []string{idA, idB, idAdmin}}} {
		var list api.SandboxList
		a := td.do(t, tc.token, "GET", "/v1/sandboxes", "")
		if err := json.Unmarshal([]byte(a.body), &list); err != nil {
			t.Fatalf("list: %v: %s", err, a.body)
		}
		var ids []string
		for _, sb := range list.Sandboxes {
			ids = append(ids, sb.ID)
			if owner := map[string]string{idA: "a", idB: "b"}[sb.ID]; sb.Tenant != owner {
				t.Errorf("sandbox %s: tenant %q, want %q", sb.ID, sb.Tenant, owner)
			}
		}
		slices.Sort(ids)
		if !slices.Equal(ids, tc.want) {
			t.Errorf("list with %s: %v, want %v", tc.token, ids, tc.want)
		}
	}

	// Snapshots: a's is 404 for b, exactly as a missing one; listed for a and the admin only.
	for _, rt := range [][2]string{{"GET", "/v1/snapshots/"}, {"DELETE", "/v1/snapshots/"}, {"POST", "/v1/snapshots/%s/restore"}} {
		path := func(ref string) string {
			if strings.Contains(rt[1], "%s") {
				return fmt.Sprintf(rt[1], ref)
			}
			return rt[1] + ref
		}
		body := ""
		if rt[0] == "POST" {
			body = "{}"
		}
		gone := td.do(t, adminToken, rt[0], path("nosnap"), body)
		gone.body = strings.ReplaceAll(gone.body, "nosnap", "snapa")
		if got := td.do(t, tokenB, rt[0], path("snapa"), body); got != gone || got.status != 404 {
			t.Errorf("tenant b, %s %s: %d %s, want %d %s", rt[0], path("snapa"), got.status, got.body, gone.status, gone.body)
		}
	}
	for tok, want := range map[string]int{tokenA: 1, tokenB: 0, adminToken: 1} {
		var snaps []api.Snapshot
		a := td.do(t, tok, "GET", "/v1/snapshots", "")
		var wrapped struct {
			Snapshots []api.Snapshot `json:"snapshots"`
		}
		if err := json.Unmarshal([]byte(a.body), &wrapped); err != nil {
			t.Fatalf("snapshot list: %v: %s", err, a.body)
		}
		snaps = wrapped.Snapshots
		if len(snaps) != want {
			t.Errorf("snapshot list with %s: %d snapshots, want %d", tok, len(snaps), want)
		}
	}

	// Audit: b reads nothing of a's sandbox (by its ID, as of a removed one).
	if a := td.do(t, tokenB, "GET", "/v1/sandboxes/"+idA+"/audit", ""); a.status != 200 || a.body != "" {
		t.Errorf("b reading a's audit: %d %s", a.status, a.body)
	}
	// Warm templates are shared read-only; metrics are the admin's.
	if a := td.do(t, tokenB, "DELETE", "/v1/warm/0123456789abcdef01234567", ""); a.status != 403 {
		t.Errorf("b removing a warm template: %d %s, want 403", a.status, a.body)
	}
	if a := td.do(t, tokenA, "GET", "/v1/warm", ""); a.status != 200 {
		t.Errorf("a listing warm templates: %d %s", a.status, a.body)
	}
	// Removal by its owner; then b's removal of the same ID is still 404.
	if a := td.do(t, tokenA, "DELETE", "/v1/sandboxes/"+idA+"?force=true", ""); a.status != 204 {
		t.Fatalf("a removing its sandbox: %d %s", a.status, a.body)
	}
	var entries []audit.Entry
	for _, tok := range []string{tokenA, tokenB} {
		resp := td.do(t, tok, "GET", "/v1/sandboxes/"+idA+"/audit", "")
		if tok == tokenB {
			if resp.body != "" {
				var e audit.Entry
				json.Unmarshal([]byte(resp.body), &e)
				entries = append(entries, e)
			}
			continue
		}
		if !strings.Contains(resp.body, `"tenant":"a"`) || !strings.Contains(resp.body, `"caller":"tenant:a"`) {
			t.Errorf("a's audit of its removed sandbox: %d %s", resp.status, resp.body)
		}
	}
	if len(entries) != 0 {
		t.Errorf("b read a's audit entries: %v", entries)
	}
}

// TestTenantQuotaAtStart: the sandboxes found at start count against
// their tenant's quota: a (max_sandboxes 1, holding sba) is refused with
// 429 tenant_quota and the numbers before anything is made, b (max 2,
// holding sbb) is not; a create that fails (here: no domain may start)
// gives its slot back; removing sba gives a's back.
func TestTenantQuotaAtStart(t *testing.T) {
	img := testenv.Image(t)
	td := newTenantDaemon(t)
	body := fmt.Sprintf(`{"image":%q,"accel":"tcg"}`, img)
	a := td.do(t, tokenA, "POST", "/v1/sandboxes", body)
	if a.status != 429 || !strings.Contains(a.body, `"code":"tenant_quota"`) ||
		!strings.Contains(a.body, `"message":"tenant a: 1 of 1 sandboxes in use; remove one or raise max_sandboxes"`) ||
		!strings.Contains(a.body, `"details":{"asked":1,"limit":1,"resource":"sandboxes","tenant":"a","used":1}`) {
		t.Fatalf("a over its quota: %d %s", a.status, a.body)
	}
	for range 2 { // the second would be refused if the first had kept its slot
		if a := td.do(t, tokenB, "POST", "/v1/sandboxes", body); a.status != 500 || !strings.Contains(a.body, "noDomains") {
			t.Fatalf("b's create: %d %s, want the driver's failure (its quota is not a's)", a.status, a.body)
		}
	}
	if a := td.do(t, tokenA, "POST", "/v1/sandboxes", strings.Replace(body, "{", `{"priority":"high",`, 1)); a.status != 403 || !strings.Contains(a.body, "tenant a may create at priority normal at most, asked high") {
		t.Fatalf("a asking priority high: %d %s, want 403", a.status, a.body)
	}
	if a := td.do(t, tokenA, "DELETE", "/v1/sandboxes/sba?force=true", ""); a.status != 204 {
		t.Fatalf("remove: %d %s", a.status, a.body)
	}
	if a := td.do(t, tokenA, "POST", "/v1/sandboxes", body); a.status != 500 || !strings.Contains(a.body, "noDomains") {
		t.Fatalf("a's create after the removal: %d %s, want the driver's failure", a.status, a.body)
	}
	// The refused create is in the audit log, as a's.
	if a := td.do(t, tokenA, "GET", "/v1/audit", ""); !strings.Contains(a.body, `"tenant":"a"`) {
		t.Fatalf("a's audit: %s", a.body)
	}
	if a := td.do(t, tokenA, "GET", "/metrics", ""); a.status != 404 {
		t.Fatalf("a reading metrics (none served here): %d %s", a.status, a.body)
	}
}

// TestTenantEvents: a tenant's event stream carries only its own
// sandboxes' events; the admin's carries all.
func TestTenantEvents(t *testing.T) {
	td := newTenantDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func(token string) *bufio.Reader {
		req, _ := http.NewRequestWithContext(ctx, "GET", td.url+"/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("events: %v %v", resp, err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return bufio.NewReader(resp.Body)
	}
	next := func(r *bufio.Reader) api.Event {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("events: %v", err)
			}
			line = strings.TrimPrefix(strings.TrimSpace(line), "data: ")
			if !strings.HasPrefix(line, "{") {
				continue
			}
			var ev api.Event
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("event %q: %v", line, err)
			}
			return ev
		}
	}
	evB, evAdmin := open(tokenB), open(adminToken)
	time.Sleep(100 * time.Millisecond) // subscribed
	for _, ref := range []string{"sba", "sbb"} {
		if a := td.do(t, adminToken, "DELETE", "/v1/sandboxes/"+ref, ""); a.status != 204 {
			t.Fatalf("remove %s: %d %s", ref, a.status, a.body)
		}
	}
	if ev := next(evB); ev.Sandbox != idB || ev.Type != api.EventSandboxRemoved || ev.Tenant != "b" {
		t.Errorf("b's first event: %+v, want the removal of its sbb", ev)
	}
	for _, want := range []string{idA, idB} {
		if ev := next(evAdmin); ev.Sandbox != want || ev.Type != api.EventSandboxRemoved {
			t.Errorf("admin's event: %+v, want the removal of %s", ev, want)
		}
	}
}

// TestTenantFailedRestoreAudited: a tenant's restore that fails (a's: its
// quota is full; b's: no such snapshot) is audited with the tenant, as a
// failed create is, so the tenant reads it in its own audit.
func TestTenantFailedRestoreAudited(t *testing.T) {
	td := newTenantDaemon(t)
	for tok, snap := range map[string]string{tokenA: "snapa", tokenB: "nosnap"} {
		if a := td.do(t, tok, "POST", "/v1/snapshots/"+snap+"/restore", "{}"); a.status < 400 {
			t.Fatalf("restore of %s: %d %s, want a failure", snap, a.status, a.body)
		}
	}
	got := map[string]string{} // snapshot → the entry's tenant
	err := td.d.Audit(context.Background(), "", func(e audit.Entry) error {
		if e.Action == audit.ActionRestore {
			got[fmt.Sprint(e.Args["snapshot"])] = e.Tenant
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"snapa": "a", "nosnap": "b"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("failed restores audited with tenants %v, want %v", got, want)
	}
}
