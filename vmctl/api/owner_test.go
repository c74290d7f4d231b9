package api_test

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TestOwnerIsExecUser: a file's owner and an exec's user name the same
// guest accounts (one syntax, UserPattern): E2B's data plane takes one
// user for both.
func TestOwnerIsExecUser(t *testing.T) {
	for _, name := range []string{"user", "root", "0", "1000", "svc_web-1", "machine$", "a.b",
		".hidden", "..", "-x", "a/b", "a:b", "a b", "$", strings.Repeat("u", 31), strings.Repeat("u", 32)} {
		req := api.ExecRequest{Cmd: []string{"id"}, User: name}
		exec := req.Validate(true)
		owner := api.CheckOwner("owner", name)
		if (exec == nil) != (owner == nil) {
			t.Errorf("%q: as exec user %v, as owner %v", name, exec, owner)
		}
	}
}
