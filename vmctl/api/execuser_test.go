package api_test

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TestExecRequestUser: a user name is a valid ExecRequest.User; with a
// uid or gid, or not a name, it is 400 invalid_argument saying why.
func TestExecRequestUser(t *testing.T) {
	uid := uint32(0)
	for _, ok := range []string{"user", "root", "1000", "svc_web-1", "machine$"} {
		req := api.ExecRequest{Cmd: []string{"id"}, User: ok}
		if err := req.Validate(true); err != nil {
			t.Errorf("user %q: %v", ok, err)
		}
	}
	cases := []struct {
		req  api.ExecRequest
		want string
	}{
		{api.ExecRequest{Cmd: []string{"id"}, User: "user", UID: &uid}, `user "user" and uid/gid both given: run as a named user or as uid[:gid], not both`},
		{api.ExecRequest{Cmd: []string{"id"}, User: "a:b"}, `user "a:b" is not a user name: letters, digits, '_', '.', '-' (not first), at most 32`},
		{api.ExecRequest{Cmd: []string{"id"}, User: "-x"}, `user "-x" is not a user name: letters, digits, '_', '.', '-' (not first), at most 32`},
		{api.ExecRequest{Cmd: []string{"id"}, User: "../etc"}, `user "../etc" is not a user name: letters, digits, '_', '.', '-' (not first), at most 32`},
	}
	for _, tc := range cases {
		err := tc.req.Validate(true)
		if err == nil || err.Error() != tc.want || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("user %q: got %v, want %q", tc.req.User, err, tc.want)
		}
	}
}
