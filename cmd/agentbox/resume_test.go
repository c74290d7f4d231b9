package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// TestCLIResume: exec, cp and port with --resume resume a paused sandbox
// first and then run; without it the paused sandbox's 409 and its hint
// come through (exit 125); --resume with --agent-socket is refused.
func TestCLIResume(t *testing.T) {
	b := &backendtest.Fake{}
	var mu sync.Mutex
	paused := true
	b.Lifecycle.ResumeFn = func(context.Context, string, bool) (api.Sandbox, error) {
		mu.Lock()
		paused = false
		mu.Unlock()
		return backendtest.Sandbox(backendtest.SandboxID), nil
	}
	pause := func() { mu.Lock(); paused = true; mu.Unlock() }
	refuse := func() error {
		mu.Lock()
		defer mu.Unlock()
		if paused {
			return api.Errorf(http.StatusConflict, api.CodeNotRunning, "sandbox %s is paused: resume it first: agentbox resume work1, or pass ?resume=true", backendtest.SandboxID)
		}
		return nil
	}
	b.ExecFn = func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
		if err := refuse(); err != nil {
			return api.ExitStatus{}, err
		}
		started("e1", 7)
		io.WriteString(stdout, "awake\n")
		return api.ExitStatus{}, nil
	}
	b.UploadFn = func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
		path := req.Path
		if err := refuse(); err != nil {
			return api.FileInfo{}, err
		}
		io.Copy(io.Discard, r)
		return api.FileInfo{Path: path, Type: api.FileRegular}, nil
	}
	b.Ports.ForwardFn = func(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error) {
		if err := refuse(); err != nil {
			return api.PortForward{}, err
		}
		return backendtest.PortForward(req.GuestPort), nil
	}
	d := snapshotDaemon(t, b)
	local := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(local, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name   string
		args   []string
		method string
		stdout string
	}{
		{"exec", []string{"exec", "work1", "--", "echo"}, "Exec", "awake\n"},
		{"cp", []string{"cp", local, "work1:/tmp/f"}, "Upload", ""},
		{"port", []string{"port", "work1", "8000"}, "ForwardPort", backendtest.PortForward(8000).HostAddr + " → guest :8000\n"},
	} {
		pause()
		b.Reset()
		r := d.cli(t, nil, c.args...)
		if r.code != 125 || !strings.Contains(r.stderr, "is paused: resume it first") {
			t.Errorf("%s of a paused sandbox: %+v, want 125 with the hint", c.name, r)
		}
		b.Reset()
		args := append([]string{c.args[0], "--resume"}, c.args[1:]...)
		d.cli(t, nil, args...).check(t, 0, c.stdout, "")
		want := []string{"ResumeSandbox work1", c.method + " work1"}
		if c.name == "cp" {
			want = []string{"ResumeSandbox work1", "Stat work1", "ResumeSandbox work1", "Upload work1"}
		}
		if got := b.Calls(); !slices.Equal(got, want) {
			t.Errorf("%s --resume: backend calls %q, want %q", c.name, got, want)
		}
	}

	if r := d.cli(t, nil, "exec", "--resume", "--agent-socket", "/nonexistent", "--", "true"); r.code != 125 || !strings.Contains(r.stderr, "--resume needs the daemon") {
		t.Errorf("exec --resume --agent-socket: %+v", r)
	}
}
