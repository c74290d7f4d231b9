package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// pluginEnv makes this test binary a policy plugin (TestMain).
const pluginEnv = "AGENTBOX_DAEMON_TEST_PLUGIN"

// brokenPlugin decides a create by its "mode" label: "crash" exits the
// plugin, "hang" never answers, anything else is denied with the mode
// as reason.
type brokenPlugin struct{}

func (brokenPlugin) Check(req policy.Request) (policy.Decision, error) {
	switch mode := req.Identity.Labels["mode"]; mode {
	case "crash":
		os.Exit(2)
	case "hang":
		time.Sleep(time.Hour)
	default:
		return policy.Decision{Verdict: policy.Deny, Reason: "mode " + mode}, nil
	}
	return policy.Decision{}, nil
}

func TestMain(m *testing.M) {
	if os.Getenv(pluginEnv) != "" {
		policy.Serve(brokenPlugin{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// noDomains is a driver that has no domains and starts none: the creates
// of these tests end at the policy, before the driver.
type noDomains struct{}

func (noDomains) StartDomain(context.Context, domain.Spec) error {
	return errors.New("noDomains: no domain may start in this test")
}
func (noDomains) DestroyDomain(context.Context, string) error { return nil }
func (noDomains) WatchStop(ctx context.Context, _ string) (<-chan sandbox.Stop, error) {
	return make(chan sandbox.Stop), nil
}
func (noDomains) ListDomains(context.Context) ([]sandbox.DomainStatus, error) { return nil, nil }

// A plugin that crashes or hangs on a create fails it closed (503
// policy_unavailable, audited); the next create restarts the plugin,
// whose decision is answered.
func TestPolicyPluginFailsClosed(t *testing.T) {
	img := testenv.Image(t)
	t.Setenv(pluginEnv, "1")
	pc, err := policy.NewClient([]string{os.Args[0], "-test.run=^$"}, policy.Options{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	state := t.TempDir()
	d, err := daemon.New(t.Context(), daemon.Config{Driver: noDomains{}, StateDir: state, RuntimeDir: testenv.ShortTempDir(t),
		ImageVerifyCacheDir: filepath.Join(state, "verify"), Policy: pc})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	ctx := api.WithCaller(context.Background(), api.Caller{ID: "uid:42"})
	create := func(mode string) error {
		_, err := d.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img, Accel: "tcg", Labels: map[string]string{"mode": mode}})
		return err
	}
	want := func(err error, status int, code, msg string) {
		t.Helper()
		ae := api.ErrorFrom(err)
		if ae == nil || ae.Status != status || ae.Code != code || !strings.Contains(ae.Message, msg) {
			t.Fatalf("create: %v (%+v), want %d %s saying %q", err, ae, status, code, msg)
		}
	}
	want(create("crash"), 503, api.CodePolicyUnavailable, "the plugin went away during the call")
	want(create("first"), 403, api.CodePolicyDenied, "denied by policy: mode first")
	start := time.Now()
	want(create("hang"), 503, api.CodePolicyUnavailable, "the plugin did not answer within 500ms")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the hung create took %s", took)
	}
	want(create("second"), 403, api.CodePolicyDenied, "denied by policy: mode second")

	var got []string
	d.Audit(context.Background(), "", func(e audit.Entry) error {
		if e.Action == audit.ActionCreate {
			p := e.Policy[0]
			got = append(got, e.Caller+" "+e.Error+" "+p.Hook+":"+p.Decision)
		}
		return nil
	})
	wantAudit := []string{
		"uid:42 policy_unavailable create:unavailable",
		"uid:42 policy_denied create:deny",
		"uid:42 policy_unavailable create:unavailable",
		"uid:42 policy_denied create:deny",
	}
	if strings.Join(got, "\n") != strings.Join(wantAudit, "\n") {
		t.Errorf("audited creates:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantAudit, "\n"))
	}
	if list, _ := d.ListSandboxes(context.Background(), nil, ""); len(list) != 0 {
		t.Errorf("sandboxes after refused creates: %+v", list)
	}
}
