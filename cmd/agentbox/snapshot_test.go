package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// snapshotDaemon serves b on a fresh socket and returns a testDaemon for
// its cli method.
func snapshotDaemon(t *testing.T, b *backendtest.Fake) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "abs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &testDaemon{sock: filepath.Join(dir, "s"), config: filepath.Join(dir, "config.toml")}
	if err := os.WriteFile(d.config, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Shutdown(t.Context())
		<-done
	})
	return d
}

func TestCLISnapshots(t *testing.T) {
	b := &backendtest.Fake{}
	var restored api.RestoreRequest
	var created api.CreateSandboxRequest
	b.Snapshot.RestoreFn = func(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
		restored = req
		return backendtest.Sandbox("aaaaaaaaaaaa"), nil
	}
	b.Snapshot.DeleteFn = func(ctx context.Context, name string) error {
		if name == "gone" {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no snapshot %q: `agentbox snapshot ls` lists them", name)
		}
		return nil
	}
	b.CreateSandboxFn = func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
		created = req
		return backendtest.Sandbox(backendtest.SandboxID), nil
	}
	d := snapshotDaemon(t, b)

	d.cli(t, nil, "snapshot", "save", "work1", "before").check(t, 0, "before\n", "")
	r := d.cli(t, nil, "snapshot", "ls")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "NAME") || !strings.Contains(r.stdout, "before") || !strings.Contains(r.stdout, "120.0MiB") {
		t.Errorf("snapshot ls: %+v", r)
	}
	d.cli(t, nil, "snapshot", "ls", "-q", "work1").check(t, 0, "before\n", "")
	if r := d.cli(t, nil, "snapshot", "ls", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"vmstate_bytes": 125829120`) {
		t.Errorf("snapshot ls --json: %+v", r)
	}
	r = d.cli(t, nil, "snapshot", "rm", "a", "gone", "b")
	if r.code != 125 || r.stdout != "a\nb\n" || !strings.Contains(r.stderr, `no snapshot "gone"`) {
		t.Errorf("snapshot rm with one missing: %+v", r)
	}
	d.cli(t, nil, "restore", "--name", "w2", "--label", "k=v", "--ttl", "1h", "before").check(t, 0, "aaaaaaaaaaaa\n", "")
	if restored.Name != "w2" || restored.Labels["k"] != "v" || restored.Limits.TTLSeconds != 3600 {
		t.Errorf("restore request %+v", restored)
	}
	if r := d.cli(t, nil, "restore", "before", "--name", "x"); r.code != 125 || !strings.Contains(r.stderr, "flags go before") {
		t.Errorf("restore with a flag after the snapshot: %+v", r)
	}
	if r := d.cli(t, nil, "snapshot", "save", "work1"); r.code != 125 || !strings.Contains(r.stderr, "usage: agentbox snapshot save SANDBOX NAME") {
		t.Errorf("snapshot save without a name: %+v", r)
	}
	d.cli(t, nil, "create", "--warm", "--image", "/images/x").check(t, 0, backendtest.SandboxID+"\n", "")
	if !created.Warm || created.Image != "/images/x" {
		t.Errorf("create --warm sent %+v", created)
	}
}
