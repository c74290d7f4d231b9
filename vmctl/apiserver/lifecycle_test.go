package apiserver_test

import (
	"context"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// lifecycleSuccessCases cover the pause, resume and start routes and
// ?resume=true (see successCases).
func lifecycleSuccessCases() []apiCase {
	return []apiCase{
		{name: "pause", method: "POST", target: sb + "/pause", ct: "json", body: `{}`, status: 200, called: true},
		{name: "pause to disk", method: "POST", target: sb + "/pause", ct: "json", body: `{"to_disk":true}`, status: 200, called: true},
		{name: "resume", method: "POST", target: sb + "/resume", status: 200, called: true},
		{name: "start", method: "POST", target: sb + "/start", status: 200, called: true},
		{name: "exec resume", method: "POST", target: sb + "/exec?resume=true", ct: "json", body: `{"cmd":["true"]}`, status: 200, called: true},
		{name: "stat resume", method: "GET", target: sb + "/files/stat?path=/etc&resume=true", status: 200, called: true},
	}
}

// TestResumeQuery: ?resume=true resumes (if paused) before the call, and
// only then; a bad value, and a WebSocket route's request without the
// upgrade, are refused before the backend; the backend's refusal to
// resume ends the call.
func TestResumeQuery(t *testing.T) {
	cases := []struct {
		name, method, target, body string
		setup                      func(b *backendtest.Fake)
		status                     int
		code                       string
		calls                      []string
	}{
		{"exec with resume", "POST", sb + "/exec?resume=true", `{"cmd":["true"]}`, nil, 200, "",
			[]string{"ResumeSandbox " + backendtest.SandboxID, "Exec " + backendtest.SandboxID}},
		{"exec without", "POST", sb + "/exec", `{"cmd":["true"]}`, nil, 200, "",
			[]string{"Exec " + backendtest.SandboxID}},
		{"exec resume=false", "POST", sb + "/exec?resume=false", `{"cmd":["true"]}`, nil, 200, "",
			[]string{"Exec " + backendtest.SandboxID}},
		{"upload with resume", "PUT", "/v1/sandboxes/work1/files?path=/a&resume=1", "x", nil, 201, "",
			[]string{"ResumeSandbox work1", "Upload work1"}},
		{"process with resume", "POST", sb + "/processes?resume=true", `{"cmd":["sleep","1"]}`, nil, 201, "",
			[]string{"ResumeSandbox " + backendtest.SandboxID, "StartProcess " + backendtest.SandboxID}},
		{"port forward with resume", "POST", sb + "/ports?resume=true", `{"guest_port":8000}`, nil, 201, "",
			[]string{"ResumeSandbox " + backendtest.SandboxID, "ForwardPort " + backendtest.SandboxID}},
		{"port forward without", "POST", sb + "/ports", `{"guest_port":8000}`, nil, 201, "",
			[]string{"ForwardPort " + backendtest.SandboxID}},
		{"bad bool", "POST", sb + "/exec?resume=yes", `{"cmd":["true"]}`, nil, 400, api.CodeBadRequest, nil},
		// A plain GET of a WebSocket route is refused before the resume.
		{"exec ws without upgrade", "GET", sb + "/exec/ws?resume=true", "", nil, 400, api.CodeBadRequest, nil},
		{"process ws without upgrade", "GET", sb + "/processes/p1/ws?resume=true", "", nil, 400, api.CodeBadRequest, nil},
		{"not on list", "GET", "/v1/sandboxes?resume=true", "", nil, 400, api.CodeBadRequest, nil},
		{"resume fails", "POST", sb + "/exec?resume=true", `{"cmd":["true"]}`, func(b *backendtest.Fake) {
			b.Lifecycle.ResumeFn = func(context.Context, string, bool) (api.Sandbox, error) {
				return api.Sandbox{}, api.Errorf(422, api.CodeSnapshotUnusable, "saved state damaged")
			}
		}, 422, api.CodeSnapshotUnusable, []string{"ResumeSandbox " + backendtest.SandboxID}},
		{"pause needs a body", "POST", sb + "/pause", "", nil, 400, api.CodeBadRequest, nil},
		{"pause unknown field", "POST", sb + "/pause", `{"disk":true}`, nil, 400, api.CodeBadRequest, nil},
		{"resume of a running sandbox", "POST", sb + "/resume", "", func(b *backendtest.Fake) {
			b.Lifecycle.ResumeFn = func(context.Context, string, bool) (api.Sandbox, error) {
				return api.Sandbox{}, api.Errorf(409, api.CodeConflict, "running, not paused")
			}
		}, 409, api.CodeConflict, []string{"ResumeSandbox " + backendtest.SandboxID}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &backendtest.Fake{}
			if c.setup != nil {
				c.setup(b)
			}
			status, code := serveOnce(t, b, c.method, c.target, c.body)
			if status != c.status || code != c.code {
				t.Errorf("%s %s: %d %s, want %d %s", c.method, c.target, status, code, c.status, c.code)
			}
			if got := b.Calls(); !slices.Equal(got, c.calls) {
				t.Errorf("backend calls %q, want %q", got, c.calls)
			}
		})
	}
}

// TestResumeIfPaused: the resume of ?resume=true asks the backend to
// leave a sandbox that is not paused alone (ifPaused); the route's own
// resume does not.
func TestResumeIfPaused(t *testing.T) {
	var got []bool
	b := &backendtest.Fake{}
	b.Lifecycle.ResumeFn = func(_ context.Context, _ string, ifPaused bool) (api.Sandbox, error) {
		got = append(got, ifPaused)
		return backendtest.Sandbox(backendtest.SandboxID), nil
	}
	serveOnce(t, b, "GET", sb+"/files/list?path=/&resume=true", "")
	serveOnce(t, b, "POST", sb+"/resume", "")
	if !slices.Equal(got, []bool{true, false}) {
		t.Errorf("ifPaused of ?resume=true and POST /resume = %v, want [true false]", got)
	}
}
