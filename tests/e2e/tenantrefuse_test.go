package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestTenantRefusals runs a daemon with tenant a (host_ports [6543],
// max_port_forwards 1, max_snapshots 1) and a real TCG guest of a's: a's
// forward off loopback, below 1024, onto the daemon's own TCP port or
// beyond its one is refused with the limit named and nothing left
// listening; a's second snapshot is refused with the numbers and not
// kept; the admin still forwards off loopback (not on the egress ports)
// and a's ungranted host:PORT policy is refused before anything is made.
func TestTenantRefusals(t *testing.T) {
	image := testenv.Image(t)
	dir := t.TempDir()
	tokens := map[string]string{}
	files := map[string]string{}
	for _, who := range []string{"admin", "a", "b"} {
		tokens[who] = hex.EncodeToString(randomBytes(32))
		files[who] = filepath.Join(dir, who+".token")
		if err := os.WriteFile(files[who], []byte(tokens[who]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hash := func(who string) string {
		cmd := exec.Command(agentboxBin, "tenant", "hash")
		cmd.Stdin = strings.NewReader(tokens[who])
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agentbox tenant hash: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	tenantsFile := filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(tenantsFile, fmt.Appendf(nil, "[[tenant]]\nname = \"a\"\ntoken_sha256 = %q\nhost_ports = [6543]\nmax_port_forwards = 1\nmax_snapshots = 1\n"+
		"[[tenant]]\nname = \"b\"\ntoken_sha256 = %q\nmax_snapshot_mib = 16\n", hash("a"), hash("b")), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeLoopbackAddr(t)
	_, apiPort, _ := net.SplitHostPort(addr)
	d := newDaemon(t, "--listen-tcp", addr, "--tenants", tenantsFile)
	d.Globals = []string{"--token-file", files["admin"]}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the TCP listener", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	type answer struct {
		status int
		code   string
		msg    string
		body   string
	}
	call := func(who, method, path, body string) answer {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tokens[who])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		json.Unmarshal(b, &e)
		return answer{resp.StatusCode, e.Error.Code, e.Error.Message, strings.TrimSpace(string(b))}
	}
	free := func(hostPort string) {
		t.Helper()
		l, err := net.Listen("tcp", hostPort)
		if err != nil {
			t.Fatalf("%s is taken after a refused forward: %v", hostPort, err)
		}
		l.Close()
	}

	// An ungranted host port: refused before anything is made.
	a := call("a", "POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"accel":"tcg","network":{"mode":"allowlist","allow":["host:%s"]}}`, image, apiPort))
	if a.status != 403 || a.msg != fmt.Sprintf("tenant a may not expose the host's port %s (--allow host:%s): tenants reach only the host ports the operator grants in the tenants file's host_ports (granted: [6543]); ask the operator for host ports", apiPort, apiPort) {
		t.Fatalf("a's host:%s: %d %s", apiPort, a.status, a.body)
	}
	if l := call("admin", "GET", "/v1/sandboxes", ""); strings.Contains(l.body, `"id"`) {
		t.Fatalf("a sandbox was made: %s", l.body)
	}

	r := tenantCLI(t, addr, files["a"], "create", "--image", image, "--accel", "tcg", "--name", "refusals")
	if r.code != 0 {
		t.Fatalf("a's create: exit %d: %s", r.code, r.stderr)
	}
	id := strings.TrimSpace(string(r.stdout))
	d.Track(id)
	ports := "/v1/sandboxes/" + id + "/ports"

	off := freeLoopbackAddr(t)
	_, offPort, _ := net.SplitHostPort(off)
	wild := "0.0.0.0:" + offPort
	tenantMsg := func(addr string) string {
		return "host address " + addr + ": tenants may forward only to loopback ports >= 1024 (127.0.0.1:PORT, [::1]:PORT, or port 0 for a free one); ask the operator for host ports"
	}
	for _, tc := range []struct {
		addr, code, msg string
		status          int
	}{
		{wild, "permission_denied", tenantMsg(wild), 403},
		{"127.0.0.1:80", "permission_denied", tenantMsg("127.0.0.1:80"), 403},
		{"127.0.0.1:6543", "permission_denied", "host address 127.0.0.1:6543: port 6543 is a host port the operator grants to tenants' sandboxes (host_ports): tenants may not forward it; choose another port, or leave the port out for a free one", 403},
		{addr, "conflict", fmt.Sprintf("host address %s: port %s is one of the daemon's own listeners ([%s]): choose another port, or leave the port out for a free one", addr, apiPort, apiPort), 409},
	} {
		a := call("a", "POST", ports, fmt.Sprintf(`{"guest_port":8000,"host_addr":%q}`, tc.addr))
		if a.status != tc.status || a.code != tc.code || a.msg != tc.msg {
			t.Errorf("a's forward at %s: %d %s\nwant %d %s %s", tc.addr, a.status, a.body, tc.status, tc.code, tc.msg)
		}
	}
	free(wild)
	free("127.0.0.1:6543")
	if a := call("a", "POST", ports, `{"guest_port":8000}`); a.status != 201 {
		t.Fatalf("a's first forward: %d %s", a.status, a.body)
	}
	a = call("a", "POST", ports, fmt.Sprintf(`{"guest_port":8001,"host_addr":%q}`, off))
	if want := fmt.Sprintf("tenant a: sandbox %s has 1 of 1 port forwards; remove one (agentbox port rm %s PORT) or raise max_port_forwards", id, id); a.status != 429 || a.code != "tenant_quota" || a.msg != want {
		t.Errorf("a's second forward: %d %s, want 429 %s", a.status, a.body, want)
	}
	free(off)
	// The admin: off loopback yes, on the egress ports no.
	if a := call("admin", "POST", ports, fmt.Sprintf(`{"guest_port":8002,"host_addr":%q}`, wild)); a.status != 201 {
		t.Errorf("the admin's forward at %s: %d %s", wild, a.status, a.body)
	}
	if a := call("admin", "POST", ports, `{"guest_port":8003,"host_addr":"0.0.0.0:443"}`); a.status != 409 || !strings.Contains(a.msg, "port 443 off loopback is the sandboxes' egress port") {
		t.Errorf("the admin's forward at 0.0.0.0:443: %d %s", a.status, a.body)
	}

	// Snapshots: one is a's to keep, the second is refused and not kept.
	if a := call("a", "POST", "/v1/sandboxes/"+id+"/snapshots", `{"name":"one"}`); a.status != 201 {
		t.Fatalf("a's first snapshot: %d %s", a.status, a.body)
	}
	a = call("a", "POST", "/v1/sandboxes/"+id+"/snapshots", `{"name":"two"}`)
	if want := "tenant a: 1 of 1 snapshots kept; remove one (agentbox snapshot rm NAME) or raise max_snapshots"; a.status != 429 || a.code != "tenant_quota" || a.msg != want {
		t.Errorf("a's second snapshot: %d %s, want 429 %s", a.status, a.body, want)
	}
	var snaps struct {
		Snapshots []struct{ Name string } `json:"snapshots"`
	}
	if l := call("a", "GET", "/v1/snapshots", ""); json.Unmarshal([]byte(l.body), &snaps) != nil || len(snaps.Snapshots) != 1 || snaps.Snapshots[0].Name != "one" {
		t.Errorf("a's snapshots: %s, want only one", l.body)
	}

	// b's snapshot is larger than its max_snapshot_mib (the guest's RAM
	// alone is more): known only once saved, it is removed again.
	r = tenantCLI(t, addr, files["b"], "create", "--image", image, "--accel", "tcg", "--name", "bytes")
	if r.code != 0 {
		t.Fatalf("b's create: exit %d: %s", r.code, r.stderr)
	}
	idB := strings.TrimSpace(string(r.stdout))
	d.Track(idB)
	a = call("b", "POST", "/v1/sandboxes/"+idB+"/snapshots", `{"name":"big"}`)
	if a.status != 429 || a.code != "tenant_quota" || !strings.HasPrefix(a.msg, "tenant b: the snapshot takes ") ||
		!strings.Contains(a.msg, "and its others 0 of 16 MiB (0 of 16777216 bytes): it was removed again; remove some (agentbox snapshot rm NAME) or raise max_snapshot_mib") {
		t.Errorf("b's snapshot over max_snapshot_mib: %d %s", a.status, a.body)
	}
	if l := call("b", "GET", "/v1/snapshots", ""); json.Unmarshal([]byte(l.body), &snaps) != nil || len(snaps.Snapshots) != 0 {
		t.Errorf("b's snapshots after the refusal: %s, want none", l.body)
	}
	if l := call("admin", "GET", "/v1/snapshots/big", ""); l.status != 404 {
		t.Errorf("the refused snapshot, for the admin: %d %s, want 404", l.status, l.body)
	}
	// The sandbox runs on, as after any save.
	if r := tenantCLI(t, addr, files["b"], "exec", idB, "--", "true"); r.code != 0 {
		t.Errorf("b's sandbox after the refused save: exit %d: %s", r.code, r.stderr)
	}
}
