package e2e

// The policy plugin shipped in the repository (cmd/agentbox-policy, built
// here with go build) run by the real daemon (`serve --policy`) against a
// real guest: allow, deny and modify on every hook through the REST API
// and the CLI, and the decisions in the audit log.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// policyRules is the rule file of the tests.
const policyRules = `
[[deny]]
name = "no-rm-rf"
argv = ["rm", "-rf", "**"]
reason = "no recursive deletes here"

[[deny]]
name = "etc-read-only"
paths = ["/etc/**"]
tools = ["file.write"]
reason = "/etc is read-only"

[[deny]]
name = "secrets"
paths = ["/root/secret*"]
tools = ["file.read"]
reason = "secrets stay in the sandbox"

[[deny]]
name = "no-ssh"
ports = [22]
reason = "no ssh forwards"

[[deny]]
name = "no-open-network"
network_modes = ["open"]
reason = "no open network"

[[deny]]
name = "blocked-tier"
tools = ["create"]
labels = { tier = "blocked" }
reason = "this tier may not create sandboxes"

[[create]]
name = "cap-ttl"
max_ttl_seconds = 3600
set_labels = { policy = "checked" }

[[network]]
name = "narrow-to-none"
labels = { net = "narrow" }
mode = "none"

[[exec]]
name = "exec-limits"
max_timeout_ms = 1500
strip_env = ["AWS_*"]
set_env = { POLICY = "on" }

[[file]]
name = "user-owns-work"
paths = ["/home/user/**"]
owner = "user"

[[port]]
name = "loopback"
host_addr = "127.0.0.1:0"
`

// wirePolicyAudit is an audit entry with its policy decisions.
type wirePolicyAudit struct {
	Action  string         `json:"action"`
	Sandbox string         `json:"sandbox"`
	Args    map[string]any `json:"args"`
	Error   string         `json:"error"`
	Policy  []struct {
		Hook     string         `json:"hook"`
		Decision string         `json:"decision"`
		Reason   string         `json:"reason"`
		Rule     string         `json:"rule"`
		Changes  map[string]any `json:"changes"`
	} `json:"policy"`
}

// decisions returns "hook:decision:rule" of each decision of e.
func (e wirePolicyAudit) decisions() string {
	var out []string
	for _, p := range e.Policy {
		out = append(out, p.Hook+":"+p.Decision+":"+p.Rule)
	}
	return strings.Join(out, " ")
}

// policyAudit returns the audit entries of ref (all when "").
func (d *daemon) policyAudit(ref string) []wirePolicyAudit {
	d.t.Helper()
	path := "/v1/audit"
	if ref != "" {
		path = "/v1/sandboxes/" + ref + "/audit"
	}
	body, _ := d.call("GET", path, nil, http.StatusOK)
	var out []wirePolicyAudit
	for _, line := range bytes.Split(bytes.TrimSpace(body), []byte("\n")) {
		var e wirePolicyAudit
		if err := json.Unmarshal(line, &e); err != nil {
			d.t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// buildPolicyPlugin builds cmd/agentbox-policy into a temporary directory
// and writes rules next to it; it returns the --policy command line.
func buildPolicyPlugin(t *testing.T, rules string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "agentbox-policy")
	build := exec.Command("go", "build", "-o", bin, "github.com/agentbox/agentbox/cmd/agentbox-policy")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building agentbox-policy: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "rules.toml")
	if err := os.WriteFile(file, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%s --rules '%s'", bin, file)
}

func TestPolicyPlugin(t *testing.T) {
	d := startDaemon(t, "--policy", buildPolicyPlugin(t, policyRules))

	// create: denied by label (no guest boots), open network denied,
	// then a create modified: TTL capped, a label set, its allowlist
	// turned into no network at all.
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"labels":{"tier":"blocked"}`)), 403, "policy_denied")
	if e.Message != "denied by policy: this tier may not create sandboxes" {
		t.Errorf("blocked tier: message %q", e.Message)
	}
	e = d.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"network":{"mode":"open"}`)), 403, "policy_denied")
	if e.Message != "denied by policy: no open network" {
		t.Errorf("open network: message %q", e.Message)
	}
	sb := d.create(createBody(t, `"name":"pol1","labels":{"net":"narrow"},"limits":{"ttl_seconds":86400},"network":{"mode":"allowlist","allow":["example.com"]}`))
	if sb.Labels["policy"] != "checked" || sb.Labels["net"] != "narrow" || sb.Limits.TTLSeconds != 3600 {
		t.Errorf("created %+v: want label policy=checked and the TTL capped to 3600 s", sb)
	}
	var net struct {
		Network struct {
			Mode string `json:"mode"`
		} `json:"network"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+sb.ID, nil, http.StatusOK, &net)
	if net.Network.Mode != "none" {
		t.Errorf("network mode %q, want none (the policy's change)", net.Network.Mode)
	}
	if n := len(d.list("")); n != 1 {
		t.Errorf("%d sandboxes after two denied creates and one allowed, want 1", n)
	}
	// No network is no NIC in the guest, not an allowlist NIC.
	d.expectExec(sb.ID, `{"cmd":["ls","/sys/class/net"]}`, 0, "lo\n", "")

	// exec: denied through the API (attached and detached) and the CLI,
	// modified: env stripped and set, the timeout forced.
	r, err := d.exec(sb.ID, `{"cmd":["rm","-rf","/tmp"]}`)
	if err != nil || r.status != 403 || r.err == nil || r.err.Code != "policy_denied" || r.err.Message != "denied by policy: no recursive deletes here" {
		t.Errorf("exec rm -rf: %+v (err %+v), %v; want 403 policy_denied", r, r.err, err)
	}
	d.apiError("POST", "/v1/sandboxes/"+sb.ID+"/processes", "application/json", []byte(`{"cmd":["rm","-rf","/tmp"]}`), 403, "policy_denied")
	c := d.cli(nil, "exec", "pol1", "--", "/bin/rm", "-rf", "/tmp")
	if c.code != 125 || !strings.Contains(string(c.stderr), "denied by policy: no recursive deletes here") {
		t.Errorf("CLI exec: exit %d, stderr %q; want 125 and the reason", c.code, c.stderr)
	}
	d.expectExec(sb.ID, `{"cmd":["sh","-c","echo ${AWS_KEY:-none} $POLICY $KEEP"],"env":["AWS_KEY=secret","KEEP=kept"]}`, 0, "none on kept\n", "")
	r = d.mustExec(sb.ID, `{"cmd":["sleep","30"],"timeout_ms":10000}`)
	if r.exit == nil || !r.exit.TimedOut || r.exit.TimeoutMs != 1500 || r.exit.DurationMs > 9000 {
		t.Errorf("sleep 30 asking 10 s under max_timeout_ms 1500: %+v, want timed out after the policy's 1500 ms", r.exit)
	}
	c = d.cli(nil, "exec", "--timeout", "10s", "pol1", "--", "sleep", "30")
	if c.code != 124 || !strings.Contains(string(c.stderr), "command timed out after 1.5s and was killed") {
		t.Errorf("CLI exec under the policy's timeout: exit %d, stderr %q; want 124 naming 1.5s", c.code, c.stderr)
	}

	// files: a write to /etc and a read of a secret denied (also through
	// the CLI); other reads and writes allowed; writes under /home/user
	// owned by user.
	d.apiError("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/etc/evil", "application/octet-stream", []byte("x"), 403, "policy_denied")
	d.apiError("POST", "/v1/sandboxes/"+sb.ID+"/files/mkdir", "application/json", []byte(`{"path":"/etc/d"}`), 403, "policy_denied")
	d.apiError("POST", "/v1/sandboxes/"+sb.ID+"/files/move", "application/json", []byte(`{"source":"/tmp/a","destination":"/etc/a"}`), 403, "policy_denied")
	d.apiError("DELETE", "/v1/sandboxes/"+sb.ID+"/files?path=/etc/hostname", "", nil, 403, "policy_denied")
	// A denied call did nothing in the guest.
	d.expectExec(sb.ID, `{"cmd":["sh","-c","test ! -e /etc/evil && test ! -e /etc/d && test ! -e /etc/a && test -f /etc/hostname && echo ok"]}`, 0, "ok\n", "")
	d.call("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/root/secret.txt", octets("s3cret"), http.StatusCreated)
	d.apiError("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/root/secret.txt", "", nil, 403, "policy_denied")
	c = d.cli(nil, "cp", "pol1:/root/secret.txt", filepath.Join(t.TempDir(), "x"))
	if c.code != 125 || !strings.Contains(string(c.stderr), "secrets stay in the sandbox") {
		t.Errorf("CLI cp out of a secret: exit %d, stderr %q", c.code, c.stderr)
	}
	d.call("GET", "/v1/sandboxes/"+sb.ID+"/files?path=/etc/hostname", nil, http.StatusOK)
	d.call("PUT", "/v1/sandboxes/"+sb.ID+"/files?path=/home/user/notes.txt", octets("hi"), http.StatusCreated)
	d.expectExec(sb.ID, `{"cmd":["stat","-c","%U","/home/user/notes.txt","/root/secret.txt"]}`, 0, "user\nroot\n", "")

	// ports: 22 denied, others kept to loopback.
	d.apiError("POST", "/v1/sandboxes/"+sb.ID+"/ports", "application/json", []byte(`{"guest_port":22}`), 403, "policy_denied")
	var pf wirePort
	d.callJSON("POST", "/v1/sandboxes/"+sb.ID+"/ports", `{"guest_port":8000,"host_addr":"0.0.0.0:0"}`, http.StatusCreated, &pf)
	if !strings.HasPrefix(pf.HostAddr, "127.0.0.1:") {
		t.Errorf("forward at %s, want 127.0.0.1 (the policy's host_addr)", pf.HostAddr)
	}

	// The audit log has every decision, with the refused calls.
	want := map[string]string{ // action and first argument → decisions, error
		"create:":                          "create:deny:blocked-tier|policy_denied",
		"create:open":                      "create:modify:cap-ttl network:deny:no-open-network|policy_denied",
		"create:pol1":                      "create:modify:cap-ttl network:modify:narrow-to-none|",
		"exec:[rm -rf /tmp]":               "exec:deny:no-rm-rf|policy_denied",
		"process.start:[rm -rf /tmp]":      "exec:deny:no-rm-rf|policy_denied",
		"exec:[/bin/rm -rf /tmp]":          "exec:deny:no-rm-rf|policy_denied",
		"exec:[sleep 30]":                  "exec:modify:exec-limits|",
		"file.upload:/etc/evil":            "file:deny:etc-read-only|policy_denied",
		"file.mkdir:/etc/d":                "file:deny:etc-read-only|policy_denied",
		"file.move:/tmp/a":                 "file:deny:etc-read-only|policy_denied",
		"file.remove:/etc/hostname":        "file:deny:etc-read-only|policy_denied",
		"file.download:/etc/hostname":      "file:allow:|",
		"file.upload:/home/user/notes.txt": "file:modify:user-owns-work|",
		"port.open:22":                     "port:deny:no-ssh|policy_denied",
		"port.open:8000":                   "port:modify:loopback|",
	}
	got := map[string]string{}
	for _, e := range d.policyAudit("") {
		key := e.Action + ":"
		switch {
		case e.Action == "create" && e.Args["name"] != nil:
			key += fmt.Sprint(e.Args["name"])
		case e.Action == "create" && e.Args["network"] != nil:
			key += fmt.Sprint(e.Args["network"])
		case e.Args["cmd"] != nil:
			key += fmt.Sprint(e.Args["cmd"])
		case e.Args["path"] != nil:
			key += fmt.Sprint(e.Args["path"])
		case e.Args["source"] != nil:
			key += fmt.Sprint(e.Args["source"])
		case e.Args["guest_port"] != nil:
			key += fmt.Sprint(e.Args["guest_port"])
		}
		if _, ok := want[key]; ok {
			got[key] = e.decisions() + "|" + e.Error
		}
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("audit %s: %q, want %q", k, got[k], w)
		}
	}
	for _, e := range d.policyAudit(sb.ID) {
		if e.Action == "exec" && fmt.Sprint(e.Args["cmd"]) == "[sleep 30]" {
			if ch := e.Policy[0].Changes; fmt.Sprint(ch["max_timeout_ms"]) != "1500" || fmt.Sprint(ch["set_env_keys"]) != "[POLICY]" || fmt.Sprint(e.Args["timeout_ms"]) != "1500" {
				t.Errorf("audit of sleep 30: changes %v, args %v", ch, e.Args)
			}
		}
	}
}

// A plugin that cannot start stops serve before it listens, saying why.
func TestPolicyPluginMissing(t *testing.T) {
	sock := filepath.Join(testenv.ShortTempDir(t), "api.sock")
	cmd := exec.Command(agentboxBin, "--uri", testenv.URI(), "--state-dir", t.TempDir(), "--runtime-dir", testenv.ShortTempDir(t),
		"--socket", sock, "serve", "--policy", "/nonexistent/agentbox-policy --rules x")
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(string(out),
		"agentbox: --policy: policy plugin /nonexistent/agentbox-policy: start: fork/exec /nonexistent/agentbox-policy: no such file or directory\n") {
		t.Fatalf("serve with a missing plugin: exit %d (%v), output %q; want 125 and why", code, err, out)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}

	// A plugin that exits before its handshake (a rule file with a deny
	// without a reason): serve says what the plugin said.
	policy := buildPolicyPlugin(t, "[[deny]]\nargv = [\"rm\"]\n")
	cmd = exec.Command(agentboxBin, "--uri", testenv.URI(), "--state-dir", t.TempDir(), "--runtime-dir", testenv.ShortTempDir(t),
		"--socket", sock, "serve", "--policy", policy)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	out, err = cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 125 || !strings.Contains(string(out), "start: the plugin exited before its handshake, saying \"agentbox-policy: ") ||
		!strings.Contains(string(out), "deny[1]: a deny rule needs a reason (the caller sees it)") {
		t.Fatalf("serve with a bad rule file: exit %d (%v), output %q; want 125 and the plugin's reason", code, err, out)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}
}
