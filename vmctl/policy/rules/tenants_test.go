package rules_test

import (
	"testing"

	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/policy/rules"
)

// TestTenants: a rule's tenants match the tenant a request acts for
// (globs), whatever its caller (here the E2B front's "e2b"); "" matches
// the admin only.
func TestTenants(t *testing.T) {
	e, err := rules.Parse(`
[[deny]]
tools = ["exec"]
tenants = ["team-*"]
reason = "teams run no commands"
[[deny]]
tools = ["exec"]
tenants = [""]
reason = "the admin runs no commands either"
`)
	if err != nil {
		t.Fatal(err)
	}
	req := func(tn string) policy.Request {
		return policy.Request{Hook: policy.HookExec, Identity: policy.Identity{Caller: "e2b", Tenant: tn}, Exec: &policy.ExecRequest{Argv: []string{"ls"}}}
	}
	for tn, want := range map[string]string{"team-a": "teams run no commands", "": "the admin runs no commands either", "solo": ""} {
		d := e.Decide(req(tn))
		if want == "" && d.Verdict != policy.Allow || want != "" && (d.Verdict != policy.Deny || d.Reason != want) {
			t.Errorf("tenant %q: %+v, want %q", tn, d, want)
		}
	}
}
