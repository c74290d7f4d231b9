package rules_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/policy/rules"
)

func TestMatchArgv(t *testing.T) {
	for _, tc := range []struct {
		pattern, argv []string
		want          bool
	}{
		{[]string{"rm", "-rf", "*"}, []string{"rm", "-rf", "/"}, true},
		{[]string{"rm", "-rf", "*"}, []string{"/usr/bin/rm", "-rf", "/work"}, true}, // base name
		{[]string{"rm", "-rf", "*"}, []string{"rm", "-rf"}, false},                  // * is exactly one
		{[]string{"rm", "-rf", "*"}, []string{"rm", "-rf", "a", "b"}, false},
		{[]string{"rm", "**"}, []string{"rm"}, true}, // ** may be none
		{[]string{"rm", "**"}, []string{"rm", "-r", "-f", "x"}, true},
		{[]string{"/bin/rm", "**"}, []string{"rm", "x"}, false}, // a pattern with / is the path itself
		{[]string{"pip*", "install", "**"}, []string{"pip3", "install", "x"}, true},
		{[]string{"curl", "*://*"}, []string{"curl", "http://a/b/c"}, true}, // * crosses / in arguments
		{[]string{"python3", "-c", "*"}, []string{"python3", "-V"}, false},
		{[]string{"sh"}, []string{"bash"}, false},
	} {
		if got := rules.MatchArgv(tc.pattern, tc.argv); got != tc.want {
			t.Errorf("MatchArgv(%q, %q) = %v, want %v", tc.pattern, tc.argv, got, tc.want)
		}
	}
}

func TestMatchPath(t *testing.T) {
	for _, tc := range []struct {
		glob, path string
		want       bool
	}{
		{"/etc/**", "/etc/passwd", true},
		{"/etc/**", "/etc", true}, // ** may be no element
		{"/etc/**", "/etc/ssh/sshd_config", true},
		{"/etc/**", "/work/../etc/shadow", true}, // cleaned first
		{"/etc/**", "/etcetera/x", false},
		{"/etc/*", "/etc/ssh/sshd_config", false}, // * stays in one element
		{"/work/*.py", "/work/a.py", true},
		{"/work/*.py", "/work/sub/a.py", false},
		{"/**/.ssh/**", "/root/.ssh/authorized_keys", true},
		{"/home/*/.bashrc", "/home/user/.bashrc", true},
	} {
		if got := rules.MatchPath(tc.glob, tc.path); got != tc.want {
			t.Errorf("MatchPath(%q, %q) = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

const sample = `
[[deny]]
name = "no-rm-rf"
argv = ["rm", "-rf", "**"]
reason = "no recursive deletes"

[[deny]]
paths = ["/etc/**"]
tools = ["file.write"]
reason = "/etc is read-only"

[[deny]]
tools = ["exec", "file.write"]
labels = { tier = "read*" }
reason = "read-only sandboxes run nothing"

[[deny]]
ports = [22]
reason = "no ssh forwards"

[[deny]]
network_modes = ["open"]
callers = ["token", "tcp:*"]
reason = "remote callers get no open network"

[[allow]]
name = "admin"
callers = ["uid:0"]

[[exec]]
name = "timeout"
max_timeout_ms = 60000
strip_env = ["AWS_*"]
set_env = { PIP_NO_INPUT = "1" }

[[exec]]
name = "short-for-agents"
labels = { agent = "*" }
max_timeout_ms = 5000
user = "user"

[[create]]
max_vcpus = 2
set_labels = { policy = "on" }

[[file]]
paths = ["/work/**"]
owner = "user"

[[port]]
host_addr = "127.0.0.1:0"

[[network]]
templates = ["python"]
mode = "allowlist"
allow = ["packages.example.com"]
`

func exec(caller string, labels map[string]string, argv ...string) policy.Request {
	return policy.Request{Hook: policy.HookExec, Identity: policy.Identity{Caller: caller, Sandbox: "0123456789ab", Labels: labels},
		Exec: &policy.ExecRequest{Argv: argv, Mode: policy.ExecAttached}}
}

func file(access, p, dest string) policy.Request {
	return policy.Request{Hook: policy.HookFile, Identity: policy.Identity{Caller: "uid:1000"},
		File: &policy.FileRequest{Op: "x", Access: access, Path: p, Destination: dest}}
}

func TestDecide(t *testing.T) {
	e, err := rules.Parse(sample)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  policy.Request
		want policy.Decision
	}{
		{"deny argv", exec("uid:1000", nil, "rm", "-rf", "/"),
			policy.Decision{Verdict: policy.Deny, Reason: "no recursive deletes", Rule: "no-rm-rf"}},
		{"deny overrides allow", exec("uid:0", nil, "rm", "-rf", "/"),
			policy.Decision{Verdict: policy.Deny, Reason: "no recursive deletes", Rule: "no-rm-rf"}},
		{"exec changes merged", exec("uid:1000", map[string]string{"agent": "a1"}, "ls"),
			policy.Decision{Verdict: policy.Modify, Rule: "timeout,short-for-agents", Exec: &policy.ExecChanges{
				MaxTimeoutMs: 5000, StripEnv: []string{"AWS_*"}, SetEnv: map[string]string{"PIP_NO_INPUT": "1"}, User: "user"}}},
		{"allow rule named", exec("uid:0", nil, "ls"),
			policy.Decision{Verdict: policy.Modify, Rule: "admin,timeout", Exec: &policy.ExecChanges{
				MaxTimeoutMs: 60000, StripEnv: []string{"AWS_*"}, SetEnv: map[string]string{"PIP_NO_INPUT": "1"}}}},
		{"label tag denies exec", exec("uid:1000", map[string]string{"tier": "readonly"}, "ls"),
			policy.Decision{Verdict: policy.Deny, Reason: "read-only sandboxes run nothing", Rule: "deny[3]"}},
		{"path write denied", file(policy.AccessWrite, "/etc/hosts", ""),
			policy.Decision{Verdict: policy.Deny, Reason: "/etc is read-only", Rule: "deny[2]"}},
		{"move into /etc denied", file(policy.AccessWrite, "/work/a", "/etc/a"),
			policy.Decision{Verdict: policy.Deny, Reason: "/etc is read-only", Rule: "deny[2]"}},
		{"path read allowed", file(policy.AccessRead, "/etc/hosts", ""),
			policy.Decision{Verdict: policy.Allow}},
		{"file owner", file(policy.AccessWrite, "/work/a.txt", ""),
			policy.Decision{Verdict: policy.Modify, Rule: "file[1]", File: &policy.FileChanges{Owner: "user"}}},
		{"port denied", policy.Request{Hook: policy.HookPort, Port: &policy.PortRequest{GuestPort: 22}},
			policy.Decision{Verdict: policy.Deny, Reason: "no ssh forwards", Rule: "deny[4]"}},
		{"port changed", policy.Request{Hook: policy.HookPort, Port: &policy.PortRequest{GuestPort: 8000, HostAddr: "0.0.0.0:0"}},
			policy.Decision{Verdict: policy.Modify, Rule: "port[1]", Port: &policy.PortChanges{HostAddr: "127.0.0.1:0"}}},
		{"network denied for tcp", policy.Request{Hook: policy.HookNetwork, Identity: policy.Identity{Caller: "tcp:10.0.0.1:5"}, Network: &policy.NetworkRequest{Mode: "open"}},
			policy.Decision{Verdict: policy.Deny, Reason: "remote callers get no open network", Rule: "deny[5]"}},
		{"network open for local", policy.Request{Hook: policy.HookNetwork, Identity: policy.Identity{Caller: "uid:1000"}, Network: &policy.NetworkRequest{Mode: "open"}},
			policy.Decision{Verdict: policy.Allow}},
		{"network by template", policy.Request{Hook: policy.HookNetwork, Identity: policy.Identity{Template: "python"}, Network: &policy.NetworkRequest{Mode: "open"}},
			policy.Decision{Verdict: policy.Modify, Rule: "network[1]", Network: &policy.NetworkChanges{Mode: "allowlist", Allow: []string{"packages.example.com"}}}},
		{"create capped", policy.Request{Hook: policy.HookCreate, Create: &policy.CreateRequest{VCPUs: 4}},
			policy.Decision{Verdict: policy.Modify, Rule: "create[1]", Create: &policy.CreateChanges{MaxVCPUs: 2, SetLabels: map[string]string{"policy": "on"}}}},
	} {
		got := e.Decide(tc.req)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %+v (exec %+v), want %+v", tc.name, got, got.Exec, tc.want)
		}
		if err := got.Validate(tc.req.Hook); err != nil {
			t.Errorf("%s: invalid decision: %v", tc.name, err)
		}
	}
}

func TestDefaultDeny(t *testing.T) {
	e, err := rules.Parse(`
default = "deny"
[[allow]]
paths = ["/work/**"]
[[allow]]
argv = ["python3", "**"]
labels = { team = "ml" }
`)
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide(file(policy.AccessWrite, "/work/a", "")); d.Verdict != policy.Allow || d.Rule != "allow[1]" {
		t.Errorf("write in /work: %+v", d)
	}
	// A move is allowed only when both paths are.
	if d := e.Decide(file(policy.AccessWrite, "/work/a", "/tmp/a")); d.Verdict != policy.Deny || d.Rule != "default" || d.Reason != "no allow rule lets uid:1000 do file.write" {
		t.Errorf("move out of /work: %+v", d)
	}
	if d := e.Decide(exec("uid:1", map[string]string{"team": "ml"}, "python3", "x.py")); d.Verdict != policy.Allow {
		t.Errorf("python3 for ml: %+v", d)
	}
	if d := e.Decide(exec("uid:1", map[string]string{"team": "web"}, "python3", "x.py")); d.Verdict != policy.Deny {
		t.Errorf("python3 for web: %+v", d)
	}
}

func TestParseErrors(t *testing.T) {
	for text, want := range map[string]string{
		`[[deny]]
argv = ["rm"]`: "deny[1]: a deny rule needs a reason",
		`[[deny]]
reason = "x"
tools = ["shell"]`: `tool "shell"`,
		`[[allow]]
argv = ["**", "x"]`: `"**" may only be the last element`,
		`[[allow]]
paths = ["etc/**"]`: "absolute guest path glob",
		`[[exec]]
labels = { a = "b" }`: "exec[1]: changes nothing",
		`[[deny]]
reason = "x"
argvv = ["rm"]`: "unknown keys deny.argvv",
		`default = "maybe"`: `default = "maybe"`,
		`[[network]]
mode = "wide"`: `mode "wide"`,
	} {
		_, err := rules.Parse(text)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", text, err, want)
		}
	}
	// Every mistake at once: an unknown table and a deny without a reason.
	_, err := rules.Parse("[[bogus]]\nx = 1\n[[deny]]\nargv = [\"rm\"]\n")
	want := "unknown keys bogus, bogus.x (see docs/policy.md for the rule file)\ndeny[1]: a deny rule needs a reason (the caller sees it)"
	if err == nil || err.Error() != want {
		t.Errorf("Parse with two mistakes = %v, want %q", err, want)
	}
}
