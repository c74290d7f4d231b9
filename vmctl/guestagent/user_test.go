package guestagent_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/guestagent"
)

// nobody is the account the default-user tests run commands as (the test
// runs as root, so the agent can switch to it).
var nobody = &guestagent.User{Name: "nobody", UID: 65534, GID: 65534, Home: "/nonexistent"}

func TestDefaultUser(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.SkipOrFail(t, "switching users needs root (CI and `make test` run as root)")
	}
	c, _ := newClientOpts(t, guestagent.Options{User: nobody, Path: "/usr/bin:/bin"})

	r := run(t, c, argv("sh", "-c", `printf '%s %s|%s|%s|%s' "$(id -u)" "$(id -g)" "$HOME" "$USER" "$PATH"`), nil)
	if want := "65534 65534|/nonexistent|nobody|/usr/bin:/bin"; r.err != nil || r.stdout != want {
		t.Fatalf("default user: got %q (%+v), want %q", r.stdout, r, want)
	}
	// An explicit uid 0 still runs as root, with root's environment.
	root := argv("sh", "-c", `printf '%s|%s' "$(id -u)" "$HOME"`)
	zero := uint32(0)
	root.UID = &zero
	if r := run(t, c, root, nil); r.err != nil || r.stdout != "0|/root" {
		t.Fatalf("uid 0: got %q (%+v)", r.stdout, r)
	}

	// Files and directories the host makes belong to the default user.
	dir := t.TempDir()
	ctx := context.Background()
	p := filepath.Join(dir, "a", "b", "f.txt")
	if err := c.WriteFile(ctx, p, bytes.NewReader([]byte("x")), 0o640, agent.WithParents()); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, agentproto.MkdirRequest{Path: filepath.Join(dir, "m", "n"), Mode: 0o700, Parents: true}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{p, filepath.Join(dir, "a"), filepath.Join(dir, "a", "b"), filepath.Join(dir, "m"), filepath.Join(dir, "m", "n")} {
		var st syscall.Stat_t
		if err := syscall.Stat(q, &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s owned by %d:%d, want 65534:65534", q, st.Uid, st.Gid)
		}
	}
	var st syscall.Stat_t
	syscall.Stat(dir, &st)
	if st.Uid != 0 {
		t.Errorf("the existing parent %s changed owner to %d", dir, st.Uid)
	}
}

func TestLookupUser(t *testing.T) {
	u := guestagent.LookupUser("root")
	if u == nil || u.UID != 0 || u.GID != 0 || u.Home != "/root" {
		t.Fatalf("root: %+v", u)
	}
	if u := guestagent.LookupUser("0"); u == nil || u.Name != "root" {
		t.Fatalf("uid 0: %+v", u)
	}
	if u := guestagent.LookupUser("no-such-user-agentbox"); u != nil {
		t.Fatalf("unknown user found: %+v", u)
	}
}

// TestNamedUser: ExecRequest.User runs the command as the named account
// of /etc/passwd, with its HOME, USER and LOGNAME, in its home when no Dir
// is given ("/" when the home is missing, as nobody's /nonexistent is);
// an unknown name does not start (ExecBadUser).
func TestNamedUser(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.SkipOrFail(t, "switching users needs root (CI and `make test` run as root)")
	}
	if u := guestagent.LookupUser("nobody"); u == nil || u.UID != 65534 || u.Home != "/nonexistent" {
		t.Fatalf("this host's nobody is %+v; the test expects uid 65534, home /nonexistent", u)
	}
	c, _ := newClientOpts(t, guestagent.Options{User: &guestagent.User{Name: "daemon", UID: 1, GID: 1, Home: "/usr/sbin"}})
	show := `printf '%s %s|%s|%s|%s|%s' "$(id -u)" "$(id -g)" "$HOME" "$USER" "$LOGNAME" "$(pwd)"`
	cases := []struct {
		user, dir, want string
	}{
		{"nobody", "", "65534 65534|/nonexistent|nobody|nobody|/"},
		{"root", "", "0 0|/root|root|root|/root"},
		{"0", "/tmp", "0 0|/root|root|root|/tmp"},
	}
	for _, tc := range cases {
		req := argv("sh", "-c", show)
		req.User, req.Dir = tc.user, tc.dir
		if r := run(t, c, req, nil); r.err != nil || r.stdout != tc.want {
			t.Errorf("user %q: got %q (%+v), want %q", tc.user, r.stdout, r, tc.want)
		}
	}
	req := argv("true")
	req.User = "no-such-user-agentbox"
	r := run(t, c, req, nil)
	want := agentproto.ExitStatus{Code: -1, ErrorKind: agentproto.ExecBadUser, Error: "user no-such-user-agentbox: no such user in the guest's /etc/passwd"}
	if r.status != want || r.status.ShellCode() != 126 {
		t.Errorf("unknown user: got %+v / %v, want %+v", r.status, r.err, want)
	}
}
