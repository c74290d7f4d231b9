package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestClusterNodeFailure: three real daemons a, b, c on one NATS server,
// with a tenant t (max_sandboxes 1); t's sandbox on c. kill -9 c: through
// a the sandbox answers 503 node_unreachable and is listed unknown within
// 15 s; t's create through a is 429 tenant_quota (the dead node's sandbox
// still counts, cluster-wide); the admin's create through a lands on a or
// b. c restarts on the same state dir: it adopts its sandbox, the
// directory is corrected and a runs commands in it again; t removes it
// through a and may create again through b. Each daemon's cleanup asserts
// no domain, tap or table is left.
func TestClusterNodeFailure(t *testing.T) {
	nats := startNATS(t)
	vcpus, _ := imageResources(t)
	room := strconv.Itoa(vcpus)
	dir := t.TempDir()
	clientToken, clusterToken := filepath.Join(dir, "api.token"), filepath.Join(dir, "cluster.token")
	must(t, "token", os.WriteFile(clientToken, []byte("client-token-0123456789abcdef\n"), 0o600))
	must(t, "token", os.WriteFile(clusterToken, []byte("cluster-token-0123456789abcdef\n"), 0o600))
	const tenantToken = "tenant-t-token-0123456789abcdef"
	sum := sha256.Sum256([]byte(tenantToken))
	tenantsFile := filepath.Join(dir, "tenants.toml")
	must(t, "tenants", os.WriteFile(tenantsFile, fmt.Appendf(nil, "[[tenant]]\nname = \"t\"\ntoken_sha256 = %q\nmax_sandboxes = 1\n", hex.EncodeToString(sum[:])), 0o600))
	addrs := map[*daemon]string{}
	node := func(name string, octet byte) *daemon {
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		d := newDaemon(t, append(netFlags(t, octet, "abcf"+name), "--capacity-vcpus", room, "--listen-tcp", addr, "--tenants", tenantsFile,
			"--cluster", nats.url(), "--node", name, "--advertise", "http://"+addr, "--cluster-trusted-network", "--cluster-token-file", clusterToken)...)
		d.Globals = []string{"--token-file", clientToken}
		must(t, "start node "+name, d.Start())
		addrs[d] = addr
		return d
	}
	// asT sends a request as tenant t to d's TCP listener.
	asT := func(d *daemon, method, path, body string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addrs[d]+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tenantToken)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := (&http.Client{Timeout: requestTimeout}).Do(req)
		must(t, method+" "+path+" as t", err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	// c alone first: t's sandbox lands on it.
	c := node("c", 75)
	testenv.WaitFor(t, time.Minute, "c up", func() bool { ns := c.nodes(); return len(ns) == 1 && ns[0].State == "up" })
	st, body := asT(c, "POST", "/v1/sandboxes", createBody(t, `"name":"onc"`))
	var onC wireSandbox
	if st != http.StatusCreated || json.Unmarshal(body, &onC) != nil {
		t.Fatalf("t's create on c: %d %s", st, body)
	}
	c.Track(onC.ID)
	a, b := node("a", 73), node("b", 74)
	a.Track(onC.ID)
	testenv.WaitFor(t, time.Minute, "three nodes up", func() bool {
		ns := a.nodes()
		return len(ns) == 3 && ns[0].State == "up" && ns[1].State == "up" && ns[2].State == "up"
	})
	if got := a.nodeOf(onC.ID); got != "c" {
		t.Fatalf("sandbox %s is on %q, want c", onC.ID, got)
	}
	a.expectExec(onC.ID, `{"cmd":["echo","before"]}`, 0, "before\n", "")

	c.Kill9()
	killed := time.Now()
	testenv.WaitFor(t, 15*time.Second, "c's sandbox node_unreachable through a", func() bool {
		st, body, _, err := a.roundTrip(t.Context(), "GET", "/v1/sandboxes/"+onC.ID, nil, "")
		return err == nil && st == http.StatusServiceUnavailable && jsonCode(body) == "node_unreachable"
	})
	t.Logf("GET through a answered 503 node_unreachable %s after kill -9 of c", time.Since(killed).Round(time.Millisecond))
	a.apiError("GET", "/v1/sandboxes/"+onC.ID, "", nil, http.StatusServiceUnavailable, "node_unreachable")
	testenv.WaitFor(t, 15*time.Second-time.Since(killed), "c's sandbox listed unknown through a", func() bool {
		for _, sb := range a.list("") {
			if sb.ID == onC.ID {
				return sb.State == "unknown" && sb.Reason == "node_unreachable"
			}
		}
		return false
	})
	t.Logf("listed unknown/node_unreachable %s after the kill", time.Since(killed).Round(time.Millisecond))

	// t's create through a: its sandbox on the dead c still counts.
	st, body = asT(a, "POST", "/v1/sandboxes", createBody(t, ""))
	if st != http.StatusTooManyRequests || jsonCode(body) != "tenant_quota" || !strings.Contains(string(body), `"message":"tenant t: 1 of 1 sandboxes in use; remove one or raise max_sandboxes"`) {
		t.Errorf("t's create with c dead: %d %s, want 429 tenant_quota, 1 of 1 sandboxes", st, body)
	}

	// The admin's create through a lands on a or b.
	fresh := a.create(createBody(t, `"name":"fresh"`))
	b.Track(fresh.ID)
	if got := a.nodeOf(fresh.ID); got != "a" && got != "b" {
		t.Fatalf("create with c dead landed on %q, want a or b", got)
	}

	// c returns on its state dir: adopted, listed running, reachable through a.
	must(t, "restart c", c.Start())
	testenv.WaitFor(t, time.Minute, "c's sandbox running again through a", func() bool {
		st, body, _, err := a.roundTrip(t.Context(), "GET", "/v1/sandboxes/"+onC.ID, nil, "")
		return err == nil && st == http.StatusOK && jsonField(body, "state") == "running" && jsonField(body, "node") == "c"
	})
	a.expectExec(onC.ID, `{"cmd":["echo","after"]}`, 0, "after\n", "")
	for _, sb := range a.list("") {
		if sb.State == "unknown" {
			t.Errorf("after c's return a still lists %s unknown (%s)", sb.ID, sb.Reason)
		}
	}

	// t removes its sandbox through a; its quota is free on every node.
	if st, body := asT(a, "DELETE", "/v1/sandboxes/"+onC.ID+"?force=true", ""); st != http.StatusNoContent {
		t.Fatalf("t's rm through a: %d %s", st, body)
	}
	testenv.WaitFor(t, time.Minute, "t's quota free through b", func() bool {
		st, body = asT(b, "POST", "/v1/sandboxes", createBody(t, ""))
		if st == http.StatusTooManyRequests && jsonCode(body) == "tenant_quota" {
			return false
		}
		return true
	})
	var again wireSandbox
	if st != http.StatusCreated || json.Unmarshal(body, &again) != nil {
		t.Fatalf("t's create through b after the rm: %d %s", st, body)
	}
	a.Track(again.ID)
	b.Track(again.ID)
}

// jsonField returns the string field key of a JSON object ("" if none).
func jsonField(body []byte, key string) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m[key].(string)
	return s
}

// jsonCode returns the code of a JSON API error ("" if none).
func jsonCode(body []byte) string {
	var e wireErrorBody
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}
