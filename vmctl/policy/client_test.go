package policy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// pluginEnv makes this test binary a policy plugin (see TestMain): its
// value is the plugin's behaviour.
const pluginEnv = "AGENTBOX_POLICY_TEST_PLUGIN"

// scripted is the test plugin: it decides by the command's first word:
// "deny" denies, "modify" forces a timeout, "crash" exits the plugin,
// "hang" never answers, "fail" answers an error, "bogus" an invalid
// decision; anything else is allowed.
type scripted struct{}

func (scripted) Check(req Request) (Decision, error) {
	word := ""
	if req.Exec != nil && len(req.Exec.Argv) > 0 {
		word = req.Exec.Argv[0]
	}
	switch word {
	case "deny":
		return Decision{Verdict: Deny, Reason: "no " + req.Identity.Caller, Rule: "r1"}, nil
	case "modify":
		return Decision{Verdict: Modify, Exec: &ExecChanges{MaxTimeoutMs: 1234}}, nil
	case "crash":
		os.Exit(3)
	case "hang":
		time.Sleep(time.Hour)
	case "fail":
		return Decision{}, errors.New("rule file unreadable")
	case "bogus":
		return Decision{Verdict: Modify}, nil
	}
	return Decision{Verdict: Allow}, nil
}

func TestMain(m *testing.M) {
	switch os.Getenv(pluginEnv) {
	case "":
		os.Exit(m.Run())
	case "badrules": // as agentbox-policy with a bad rule file
		fmt.Fprintln(os.Stderr, "agentbox-policy: rules.toml: deny[1]: a deny rule needs a reason")
		os.Exit(1)
	case "v99":
		hs := Handshake
		hs.ProtocolVersion = 99
		serve(hs, scripted{})
	default:
		Serve(scripted{})
	}
	os.Exit(0)
}

// testClient returns a client of this test binary as a plugin of kind.
func testClient(t *testing.T, kind string, timeout time.Duration) *Client {
	t.Helper()
	t.Setenv(pluginEnv, kind) // the plugin inherits the environment
	c, err := NewClient([]string{os.Args[0], "-test.run=^$"}, Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func execReq(argv ...string) Request {
	return Request{Hook: HookExec, Identity: Identity{Caller: "uid:7", Sandbox: "0123456789ab"}, Exec: &ExecRequest{Argv: argv, Mode: ExecAttached}}
}

// wantUnavailable checks err is the typed fail-closed error, answered
// 503 policy_unavailable, with msg in its text.
func wantUnavailable(t *testing.T, err error, msg string) {
	t.Helper()
	ae := api.ErrorFrom(err)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, errdefs.ErrUnavailable) || ae.Status != 503 || ae.Code != api.CodePolicyUnavailable || !strings.Contains(err.Error(), msg) {
		t.Fatalf("err = %v (%d %s), want 503 policy_unavailable saying %q", err, ae.Status, ae.Code, msg)
	}
}

func TestClientDecisions(t *testing.T) {
	c := testClient(t, "ok", 5*time.Second)
	ctx := context.Background()
	if d, err := c.Check(ctx, execReq("ls")); err != nil || d.Verdict != Allow {
		t.Fatalf("allow: %+v, %v", d, err)
	}
	if d, err := c.Check(ctx, execReq("deny")); err != nil || d.Verdict != Deny || d.Reason != "no uid:7" || d.Rule != "r1" {
		t.Fatalf("deny: %+v, %v", d, err)
	}
	if d, err := c.Check(ctx, execReq("modify")); err != nil || d.Verdict != Modify || d.Exec == nil || d.Exec.MaxTimeoutMs != 1234 {
		t.Fatalf("modify: %+v, %v", d, err)
	}
	_, err := c.Check(ctx, execReq("fail"))
	wantUnavailable(t, err, "the plugin failed the call: rule file unreadable")
	_, err = c.Check(ctx, execReq("bogus"))
	wantUnavailable(t, err, "invalid decision: modify without changes of hook exec")
	// Neither restarted the plugin: errors it answered are not crashes.
	if d, err := c.Check(ctx, execReq("ls")); err != nil || d.Verdict != Allow {
		t.Fatalf("after errors: %+v, %v", d, err)
	}
}

// A plugin that crashes on a call fails it closed; the next call starts
// a new plugin, which answers.
func TestClientCrashRestarts(t *testing.T) {
	c := testClient(t, "ok", 5*time.Second)
	ctx := context.Background()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	first := c.cur.pc.ReattachConfig().Pid
	_, err := c.Check(ctx, execReq("crash"))
	wantUnavailable(t, err, "the plugin went away during the call")
	d, err := c.Check(ctx, execReq("deny"))
	if err != nil || d.Verdict != Deny {
		t.Fatalf("after the crash: %+v, %v; want the restarted plugin's deny", d, err)
	}
	if pid := c.cur.pc.ReattachConfig().Pid; pid == first {
		t.Errorf("plugin pid %d after the restart, the crashed one's", pid)
	}
}

// A plugin that does not answer within the deadline is killed and the
// call fails closed at the deadline; the next call restarts it.
func TestClientHangTimesOut(t *testing.T) {
	c := testClient(t, "ok", 300*time.Millisecond)
	ctx := context.Background()
	start := time.Now()
	_, err := c.Check(ctx, execReq("hang"))
	took := time.Since(start)
	wantUnavailable(t, err, "did not answer within 300ms")
	if took < 300*time.Millisecond {
		t.Errorf("failed after %s, before the deadline", took)
	}
	if d, err := c.Check(ctx, execReq("ls")); err != nil || d.Verdict != Allow {
		t.Fatalf("after the hang: %+v, %v; want the restarted plugin's allow", d, err)
	}
}

// A plugin of another protocol version fails the handshake: Start says
// so, every call fails closed, and restarts back off.
func TestClientWrongVersion(t *testing.T) {
	c := testClient(t, "v99", 5*time.Second)
	wantUnavailable(t, c.Start(), "start: incompatible API version with plugin. Plugin version: 99, Client versions: [1]")
	// The second failure in a row backs off: the call fails at once,
	// without starting a plugin.
	_, err := c.Check(context.Background(), execReq("ls"))
	wantUnavailable(t, err, "incompatible API version")
	start := time.Now()
	_, err = c.Check(context.Background(), execReq("ls"))
	wantUnavailable(t, err, "restarting after 2 failures")
	if time.Since(start) > 50*time.Millisecond {
		t.Errorf("a call during the backoff took %s", time.Since(start))
	}
}

// A plugin that exits before its handshake: Start says what it wrote to
// stderr, not go-plugin's guess at a wrong architecture.
func TestClientPluginExitsAtStart(t *testing.T) {
	c := testClient(t, "badrules", 5*time.Second)
	err := c.Start()
	wantUnavailable(t, err, `start: the plugin exited before its handshake, saying "agentbox-policy: rules.toml: deny[1]: a deny rule needs a reason"`)
	if strings.Contains(err.Error(), "architecture") {
		t.Errorf("go-plugin's diagnosis left in: %v", err)
	}
}

// A plugin started by hand (no magic cookie) says what it is and exits.
func TestClientMissingPlugin(t *testing.T) {
	c, err := NewClient([]string{"/nonexistent/agentbox-policy"}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantUnavailable(t, c.Start(), "policy plugin /nonexistent/agentbox-policy: start: fork/exec /nonexistent/agentbox-policy: no such file or directory")
	c.Close()
	_, err = c.Check(context.Background(), execReq("ls"))
	wantUnavailable(t, err, "the daemon is shutting down")
}

func TestBackoff(t *testing.T) {
	c := &Client{opts: Options{MaxBackoff: time.Second}}
	for n, want := range map[int]time.Duration{1: 0, 2: 100 * time.Millisecond, 3: 200 * time.Millisecond, 5: 800 * time.Millisecond, 6: time.Second, 30: time.Second} {
		if got := c.backoff(n); got != want {
			t.Errorf("backoff(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestParseCommand(t *testing.T) {
	for in, want := range map[string][]string{
		`agentbox-policy --rules /etc/p.toml`: {"agentbox-policy", "--rules", "/etc/p.toml"},
		`  a   'b c'  "d \"e\" \\ \x" f\ g `:  {"a", "b c", `d "e" \ \x`, "f g"},
		`a''b ""`:                             {"ab", ""},
	} {
		got, err := ParseCommand(in)
		if err != nil || strings.Join(got, "|") != strings.Join(want, "|") || len(got) != len(want) {
			t.Errorf("ParseCommand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "  ", `a 'b`, `a "b`, `a\`} {
		if _, err := ParseCommand(in); err == nil {
			t.Errorf("ParseCommand(%q) accepted", in)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		d    Decision
		hook Hook
		want string
	}{
		{Decision{Verdict: Allow}, HookExec, ""},
		{Decision{Verdict: Deny}, HookExec, "deny without a reason"},
		{Decision{Verdict: "maybe"}, HookExec, `unknown verdict "maybe" (allow, deny or modify)`},
		{Decision{Verdict: Modify, File: &FileChanges{Owner: "u"}}, HookExec, "changes of hook file in a decision on exec"},
		{Decision{Verdict: Allow, Exec: &ExecChanges{User: "u"}}, HookExec, "allow with changes: answer modify"},
		{Decision{Verdict: Modify, Port: &PortChanges{HostAddr: "127.0.0.1:0"}}, HookPort, ""},
	} {
		err := tc.d.Validate(tc.hook)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || err.Error() != tc.want) {
			t.Errorf("Validate(%+v, %s) = %v, want %q", tc.d, tc.hook, err, tc.want)
		}
	}
}

func TestEnv(t *testing.T) {
	env := []string{"AWS_KEY=1", "PATH=/bin", "AWS_SECRET=2", "HOME=/root"}
	if got := StripEnv(env, []string{"AWS_*"}); strings.Join(got, " ") != "PATH=/bin HOME=/root" {
		t.Errorf("StripEnv = %q", got)
	}
	if got := SetEnv(env, map[string]string{"PATH": "/usr/bin", "X": "y"}); strings.Join(got, " ") != "AWS_KEY=1 AWS_SECRET=2 HOME=/root PATH=/usr/bin X=y" {
		t.Errorf("SetEnv = %q", got)
	}
	if env[1] != "PATH=/bin" {
		t.Errorf("SetEnv changed its argument: %q", env)
	}
}
