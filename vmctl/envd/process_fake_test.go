package envd_test

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process"
	"github.com/agentbox/agentbox/vmctl/envd/gen/process/processconnect"
)

// TestStartCwdResolved: a relative or "~" cwd is resolved against the
// home of the user the process runs as, as envd resolves it
// (permissions.ExpandAndResolve); an absolute one is cleaned.
func TestStartCwdResolved(t *testing.T) {
	var mu sync.Mutex
	var got []string
	b := &backendtest.Fake{StartProcessFn: func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
		mu.Lock()
		got = append(got, req.User+" "+req.Cwd)
		mu.Unlock()
		p := backendtest.Process("p1")
		p.Cmd = req.Cmd
		return p, nil
	}}
	pc := processconnect.NewProcessClient(http.DefaultClient, fakeData(t, b))
	for _, c := range []struct{ user, cwd, want string }{
		{"", "project", "user /home/user/project"},
		{"", "~", "user /home/user"},
		{"root", "~/x/../y", "root /root/y"},
		{"", "/srv//app/", "user /srv/app"},
		{"", "", "user "},
	} {
		got = nil
		cfg := bash("pwd")
		if c.cwd != "" {
			cfg.Cwd = strp(c.cwd)
		}
		if _, err := start(t, pc, &process.StartRequest{Process: cfg}, c.user); err != nil {
			t.Errorf("cwd %q as %q: %v", c.cwd, c.user, err)
			continue
		}
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("cwd %q as %q: the service got %q, want %q", c.cwd, c.user, got, c.want)
		}
	}
	cfg := bash("pwd")
	cfg.Cwd = strp("~other/x")
	_, err := start(t, pc, &process.StartRequest{Process: cfg}, "")
	wantCode(t, "~other", err, connect.CodeInvalidArgument, `path "~other/x": cannot expand another user's home (~NAME): give an absolute path`)
}

// TestStartUserChecked: the user of a Start is the Basic credentials'
// name checked as every data-plane request's (rpcUser): a name that is no
// account name is unauthenticated before anything reaches the service.
func TestStartUserChecked(t *testing.T) {
	b := &backendtest.Fake{}
	pc := processconnect.NewProcessClient(http.DefaultClient, fakeData(t, b))
	_, err := start(t, pc, &process.StartRequest{Process: bash("true")}, "a/b")
	wantCode(t, "user a/b", err, connect.CodeUnauthenticated, "")
	for _, c := range b.Calls() {
		if c == "StartProcess "+backendtest.SandboxID {
			t.Errorf("the service was asked to start a process: %v", b.Calls())
		}
	}
}
