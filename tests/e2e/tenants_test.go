package e2e

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// tenantCLI runs the CLI against the daemon's TCP listener with a token.
func tenantCLI(t *testing.T, addr, tokenFile string, args ...string) result {
	t.Helper()
	cmd := exec.Command(agentboxBin, append([]string{"--host", "http://" + addr, "--token-file", tokenFile}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_HOST=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentbox %v: %v", args, err)
	}
	return result{stdout.Bytes(), stderr.Bytes(), code}
}

// TestTenants runs a daemon with two tenants (serve --tenants) on TCP and
// the E2B front, with real TCG guests: a (max_sandboxes 1) hits its quota
// with 429 and the numbers while b is unaffected; b gets 404 for a's
// sandbox on the API and the CLI; each lists only its own (also through
// the E2B API); the admin sees both, with a TENANT column.
func TestTenants(t *testing.T) {
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
	// token_sha256 by `agentbox tenant hash`.
	hash := func(who string) string {
		cmd := exec.Command(agentboxBin, "tenant", "hash")
		cmd.Stdin = strings.NewReader(tokens[who] + "\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agentbox tenant hash: %v", err)
		}
		return strings.TrimSpace(string(out))
	}
	tenantsFile := filepath.Join(dir, "tenants.toml")
	if err := os.WriteFile(tenantsFile, fmt.Appendf(nil, "[[tenant]]\nname = \"a\"\ntoken_sha256 = %q\nmax_sandboxes = 1\n\n[[tenant]]\nname = \"b\"\ntoken_sha256 = %q\nmax_vcpus = 4\n", hash("a"), hash("b")), 0o600); err != nil {
		t.Fatal(err)
	}

	e2bAddr := freeLoopbackAddr(t)
	d := newDaemon(t, "--listen-tcp", "127.0.0.1:0", "--tenants", tenantsFile, "--e2b-listen", e2bAddr, "--template", "base="+image)
	d.Globals = []string{"--token-file", files["admin"]}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	var m []string
	testenv.WaitFor(t, 30*time.Second, "the TCP listener's address in the daemon's log", func() bool {
		m = regexp.MustCompile(`msg="API listening" network=tcp addr=(127\.0\.0\.1:\d+)`).FindStringSubmatch(d.Log.String())
		return m != nil
	})
	addr := m[1]
	api := func(who, method, path, body string) (int, string) {
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
		return resp.StatusCode, strings.TrimSpace(string(b))
	}

	// a creates its one sandbox; b one of its own.
	ra := tenantCLI(t, addr, files["a"], "create", "--image", image, "--accel", "tcg", "--name", "box-a")
	if ra.code != 0 {
		t.Fatalf("a's create: exit %d: %s", ra.code, ra.stderr)
	}
	idA := strings.TrimSpace(string(ra.stdout))
	d.Track(idA)
	rb := tenantCLI(t, addr, files["b"], "create", "--image", image, "--accel", "tcg", "--name", "box-b", "--priority", "low")
	if rb.code != 0 {
		t.Fatalf("b's create: exit %d: %s", rb.code, rb.stderr)
	}
	idB := strings.TrimSpace(string(rb.stdout))
	d.Track(idB)

	// a's second create: 429 tenant_quota with the numbers, nothing made.
	st, body := api("a", "POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"accel":"tcg"}`, image))
	var e struct {
		Error struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Details map[string]any `json:"details"`
		} `json:"error"`
	}
	if st != 429 || json.Unmarshal([]byte(body), &e) != nil || e.Error.Code != "tenant_quota" ||
		e.Error.Message != "tenant a: 1 of 1 sandboxes in use; remove one or raise max_sandboxes" ||
		fmt.Sprint(e.Error.Details) != "map[asked:1 limit:1 resource:sandboxes tenant:a used:1]" {
		t.Fatalf("a's second create: %d %s", st, body)
	}
	r := tenantCLI(t, addr, files["a"], "create", "--image", image, "--accel", "tcg")
	if r.code != 125 || !strings.Contains(string(r.stderr), "tenant a: 1 of 1 sandboxes in use; remove one or raise max_sandboxes") {
		t.Fatalf("a's second create by the CLI: exit %d: %s", r.code, r.stderr)
	}
	// b's quota is its own: 1 of 4 vCPUs in use; asking 4 more is refused.
	st, body = api("b", "POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"accel":"tcg","vcpus":4}`, image))
	if st != 429 || !strings.Contains(body, `"message":"tenant b: 1 of 4 vCPUs in use, the sandbox asks 4; remove sandboxes, ask for less, or raise max_vcpus"`) {
		t.Fatalf("b over its vCPUs: %d %s", st, body)
	}
	// Names are one namespace for both tenants: a's name is taken for b,
	// without a's sandbox id in the answer.
	st, body = api("b", "POST", "/v1/sandboxes", fmt.Sprintf(`{"image":%q,"accel":"tcg","name":"box-a"}`, image))
	if st != 409 || !strings.Contains(body, `"code":"name_taken"`) || !strings.Contains(body, `the name \"box-a\" is taken: choose another name`) || strings.Contains(body, idA) {
		t.Fatalf("b's create with a's name: %d %s", st, body)
	}

	// b gets 404 for a's sandbox, by ID and by name, exactly as for a missing one.
	for _, ref := range []string{idA, "box-a"} {
		for _, rt := range [][3]string{
			{"GET", "/v1/sandboxes/" + ref, ""},
			{"POST", "/v1/sandboxes/" + ref + "/exec", `{"cmd":["true"]}`},
			{"GET", "/v1/sandboxes/" + ref + "/files?path=/etc/hostname", ""},
			{"DELETE", "/v1/sandboxes/" + ref + "?force=true", ""},
		} {
			st, body := api("b", rt[0], rt[1], rt[2])
			want := fmt.Sprintf(`{"error":{"code":"not_found","message":"sandbox not found: no sandbox \"%s\": `+"`agentbox ls`"+` lists them"}}`, ref)
			if st != 404 || body != want {
				t.Errorf("b: %s %s: %d %s, want 404 %s", rt[0], rt[1], st, body, want)
			}
		}
	}
	r = tenantCLI(t, addr, files["b"], "exec", "box-a", "--", "echo", "hi")
	if r.code != 125 || !strings.Contains(string(r.stderr), `no sandbox "box-a"`) {
		t.Fatalf("b: exec box-a: exit %d %s", r.code, r.stderr)
	}
	// a's own works.
	r = tenantCLI(t, addr, files["a"], "exec", "box-a", "--", "echo", "hi")
	if r.code != 0 || string(r.stdout) != "hi\n" {
		t.Fatalf("a: exec box-a: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	// Lists: each its own (CLI and E2B API), the admin both with a TENANT column.
	for who, want := range map[string][]string{"a": {idA}, "b": {idB}} {
		r := tenantCLI(t, addr, files[who], "ls", "-q")
		if got := strings.Fields(string(r.stdout)); r.code != 0 || !slices.Equal(got, want) {
			t.Errorf("%s: ls -q: %v (exit %d %s), want %v", who, got, r.code, r.stderr, want)
		}
	}
	r = d.cli(nil, "ls")
	lines := strings.Split(strings.TrimSpace(string(r.stdout)), "\n")
	if r.code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "ID NAME TENANT STATE IMAGE TEMPLATE CPUS MEMORY AGE" ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), idA+" box-a a running") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), idB+" box-b b running") {
		t.Fatalf("admin ls: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e2bList := func(key string) []string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+e2bAddr+"/v2/sandboxes", nil)
		req.Header.Set("X-API-KEY", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list []struct {
			SandboxID string `json:"sandboxID"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != 200 {
			t.Fatalf("E2B list: %d %v", resp.StatusCode, err)
		}
		var ids []string
		for _, sb := range list {
			ids = append(ids, sb.SandboxID)
		}
		slices.Sort(ids)
		return ids
	}
	both := []string{idA, idB}
	slices.Sort(both)
	for key, want := range map[string][]string{tokens["a"]: {idA}, tokens["b"]: {idB}, tokens["admin"]: both} {
		if got := e2bList(key); !slices.Equal(got, want) {
			t.Errorf("E2B list: %v, want %v", got, want)
		}
	}
	// Through the E2B front b's key reaches none of a's sandbox: each call
	// is the 404 of an unknown sandbox, and a's sandbox goes on.
	for _, rt := range [][3]string{
		{"GET", "/sandboxes/" + idA, ""},
		{"POST", "/v2/sandboxes/" + idA + "/connect", `{"timeout":60}`},
		{"POST", "/sandboxes/" + idA + "/timeout", `{"timeout":60}`},
		{"POST", "/sandboxes/" + idA + "/pause", ""},
		{"DELETE", "/sandboxes/" + idA, ""},
	} {
		req, _ := http.NewRequest(rt[0], "http://"+e2bAddr+rt[1], strings.NewReader(rt[2]))
		req.Header.Set("X-API-KEY", tokens["b"])
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := `{"code":404,"error_code":"not_found","message":"sandbox not found: no sandbox \"` + idA + `\": ` + "`agentbox ls`" + ` lists them"}`
		if resp.StatusCode != 404 || strings.TrimSpace(string(body)) != want {
			t.Errorf("E2B as b: %s %s: %d %s, want 404 not_found", rt[0], rt[1], resp.StatusCode, body)
		}
	}
	r = tenantCLI(t, addr, files["a"], "exec", "box-a", "--", "echo", "still")
	if r.code != 0 || string(r.stdout) != "still\n" {
		t.Fatalf("a: exec box-a after b's E2B calls: exit %d %q %s", r.code, r.stdout, r.stderr)
	}

	// The audit records the tenant and the caller.
	body2, _ := d.call("GET", "/v1/sandboxes/"+idA+"/audit", nil, http.StatusOK)
	if first, _, _ := strings.Cut(string(body2), "\n"); !strings.Contains(first, `"caller":"tenant:a","tenant":"a","action":"create"`) {
		t.Errorf("a's create in the audit: %s", first)
	}
	// a's removal gives its slot back.
	if st, body := api("a", "DELETE", "/v1/sandboxes/"+idA+"?force=true", ""); st != 204 {
		t.Fatalf("a removing its sandbox: %d %s", st, body)
	}
	ra = tenantCLI(t, addr, files["a"], "create", "--image", image, "--accel", "tcg")
	if ra.code != 0 {
		t.Fatalf("a's create after the removal: exit %d: %s", ra.code, ra.stderr)
	}
	d.Track(strings.TrimSpace(string(ra.stdout)))
}
