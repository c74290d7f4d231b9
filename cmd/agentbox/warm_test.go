package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

func TestCLIWarm(t *testing.T) {
	b := &backendtest.Fake{}
	other := backendtest.WarmTemplate()
	other.Key, other.Network, other.Pooled, other.DiskMiB = "ffffffffffffffffffffffff", true, 0, 0
	b.Warm.ListFn = func(context.Context) ([]api.WarmTemplate, error) {
		return []api.WarmTemplate{backendtest.WarmTemplate(), other}, nil
	}
	var deleted []string
	b.Warm.DeleteFn = func(ctx context.Context, key string) error {
		deleted = append(deleted, key)
		if key == "eeeeeeeeeeeeeeeeeeeeeeee" {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no warm template %s: `agentbox warm ls` lists them", key)
		}
		return nil
	}
	d := snapshotDaemon(t, b)

	r := d.cli(t, nil, "warm", "ls")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[0], "KEY") || !strings.Contains(lines[0], "POOLED") {
		t.Fatalf("warm ls: %+v", r)
	}
	f := strings.Fields(lines[1])
	if f[0] != backendtest.WarmKey || f[1] != "debian" || f[2] != "1cpu/512MiB/disk" || f[3] != "2048MiB/no" || f[5] != "300.0MiB" || f[6] != "1" || f[9] != "21s" {
		t.Errorf("warm ls line %q", lines[1])
	}
	if !strings.Contains(lines[2], "1cpu/512MiB/net") {
		t.Errorf("warm ls line %q", lines[2])
	}
	d.cli(t, nil, "warm", "ls", "-q").check(t, 0, backendtest.WarmKey+"\nffffffffffffffffffffffff\n", "")
	if r := d.cli(t, nil, "warm", "ls", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"pooled": 1`) {
		t.Errorf("warm ls --json: %+v", r)
	}
	d.cli(t, nil, "warm", "rm", backendtest.WarmKey).check(t, 0, backendtest.WarmKey+"\n", "")
	r = d.cli(t, nil, "warm", "rm", "eeeeeeeeeeeeeeeeeeeeeeee", "ffffffffffffffffffffffff")
	if r.code != 125 || r.stdout != "ffffffffffffffffffffffff\n" || !strings.Contains(r.stderr, "no warm template eeee") {
		t.Errorf("warm rm with one missing: %+v", r)
	}
	deleted = nil
	d.cli(t, nil, "warm", "rm", "--all").check(t, 0, backendtest.WarmKey+"\nffffffffffffffffffffffff\n", "")
	if len(deleted) != 2 {
		t.Errorf("warm rm --all deleted %v", deleted)
	}
	if r := d.cli(t, nil, "warm", "rm"); r.code != 125 || !strings.Contains(r.stderr, "usage: agentbox warm rm KEY...") {
		t.Errorf("warm rm without keys: %+v", r)
	}
	if r := d.cli(t, nil, "warm", "rm", "--all", backendtest.WarmKey); r.code != 125 || !strings.Contains(r.stderr, "not both") {
		t.Errorf("warm rm with keys and --all: %+v", r)
	}
}

// TestSnapshotTableSourceRemoved: `snapshot ls` marks a snapshot whose
// sandbox is gone.
func TestSnapshotTableSourceRemoved(t *testing.T) {
	live, gone := backendtest.Snapshot("a"), backendtest.Snapshot("b")
	gone.SandboxName, gone.SourceRemoved = "orig", true
	var sb strings.Builder
	if err := writeSnapshotTable(&sb, []api.Snapshot{live, gone}, backendtest.Epoch.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(sb.String()), "\n")
	if len(lines) != 3 || strings.Contains(lines[1], "(removed)") || !strings.Contains(lines[1], " work1 ") || !strings.Contains(lines[2], " orig (removed) ") {
		t.Errorf("table:\n%s", sb.String())
	}
}

// TestRestoreHelpSaysLifetimeLimits: restore's help says which limits
// its flags change and that resources and network policy cannot change.
func TestRestoreHelpSaysLifetimeLimits(t *testing.T) {
	d := restoreCommand().Description
	for _, want := range []string{"Lifetime limits (--ttl, --idle-timeout, --exec-timeout, --max-execs)", "network policy cannot be changed by a restore", "must have exactly the shape"} {
		if !strings.Contains(strings.Join(strings.Fields(d), " "), want) {
			t.Errorf("restore --help lacks %q:\n%s", want, d)
		}
	}
}
