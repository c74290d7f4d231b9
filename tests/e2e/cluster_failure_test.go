package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestClusterNodeFailure: three real daemons a, b, c on one NATS server;
// a sandbox on c. kill -9 c: through a the sandbox answers 503
// node_unreachable and is listed unknown within 15 s; a new create through
// a lands on a or b. c restarts on the same state dir: it adopts its
// sandbox, the directory is corrected and a runs commands in it again.
// Each daemon's cleanup asserts no domain, tap or table is left.
func TestClusterNodeFailure(t *testing.T) {
	nats := startNATS(t)
	vcpus, _ := imageResources(t)
	room := strconv.Itoa(vcpus)
	dir := t.TempDir()
	clientToken, clusterToken := filepath.Join(dir, "api.token"), filepath.Join(dir, "cluster.token")
	must(t, "token", os.WriteFile(clientToken, []byte("client-token-0123456789abcdef\n"), 0o600))
	must(t, "token", os.WriteFile(clusterToken, []byte("cluster-token-0123456789abcdef\n"), 0o600))
	node := func(name string, octet byte) *daemon {
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		d := newDaemon(t, append(netFlags(t, octet, "abcf"+name), "--capacity-vcpus", room, "--listen-tcp", addr,
			"--cluster", nats.url(), "--node", name, "--advertise", "http://"+addr, "--cluster-token-file", clusterToken)...)
		d.globals = []string{"--token-file", clientToken}
		must(t, "start node "+name, d.start())
		return d
	}
	// c alone first: its sandbox lands on it.
	c := node("c", 75)
	waitFor(t, time.Minute, "c up", func() bool { ns := c.nodes(); return len(ns) == 1 && ns[0].State == "up" })
	onC := c.create(createBody(t, `"name":"onc"`))
	a, b := node("a", 73), node("b", 74)
	a.track(onC.ID)
	waitFor(t, time.Minute, "three nodes up", func() bool {
		ns := a.nodes()
		return len(ns) == 3 && ns[0].State == "up" && ns[1].State == "up" && ns[2].State == "up"
	})
	if got := a.nodeOf(onC.ID); got != "c" {
		t.Fatalf("sandbox %s is on %q, want c", onC.ID, got)
	}
	a.expectExec(onC.ID, `{"cmd":["echo","before"]}`, 0, "before\n", "")

	c.kill9()
	killed := time.Now()
	waitFor(t, 15*time.Second, "c's sandbox node_unreachable through a", func() bool {
		st, body, _, err := a.roundTrip(t.Context(), "GET", "/v1/sandboxes/"+onC.ID, nil, "")
		return err == nil && st == http.StatusServiceUnavailable && jsonCode(body) == "node_unreachable"
	})
	t.Logf("GET through a answered 503 node_unreachable %s after kill -9 of c", time.Since(killed).Round(time.Millisecond))
	a.apiError("GET", "/v1/sandboxes/"+onC.ID, "", nil, http.StatusServiceUnavailable, "node_unreachable")
	waitFor(t, 15*time.Second-time.Since(killed), "c's sandbox listed unknown through a", func() bool {
		for _, sb := range a.list("") {
			if sb.ID == onC.ID {
				return sb.State == "unknown" && sb.Reason == "node_unreachable"
			}
		}
		return false
	})
	t.Logf("listed unknown/node_unreachable %s after the kill", time.Since(killed).Round(time.Millisecond))

	// A new create through a lands on a or b.
	fresh := a.create(createBody(t, `"name":"fresh"`))
	b.track(fresh.ID)
	if got := a.nodeOf(fresh.ID); got != "a" && got != "b" {
		t.Fatalf("create with c dead landed on %q, want a or b", got)
	}

	// c returns on its state dir: adopted, listed running, reachable through a.
	must(t, "restart c", c.start())
	waitFor(t, time.Minute, "c's sandbox running again through a", func() bool {
		st, body, _, err := a.roundTrip(t.Context(), "GET", "/v1/sandboxes/"+onC.ID, nil, "")
		return err == nil && st == http.StatusOK && jsonField(body, "state") == "running" && jsonField(body, "node") == "c"
	})
	a.expectExec(onC.ID, `{"cmd":["echo","after"]}`, 0, "after\n", "")
	for _, sb := range a.list("") {
		if sb.State == "unknown" {
			t.Errorf("after c's return a still lists %s unknown (%s)", sb.ID, sb.Reason)
		}
	}
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
