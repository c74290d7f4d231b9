package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

func TestCLIRestoreCountAndTimeout(t *testing.T) {
	b := &backendtest.Fake{}
	var many api.RestoreRequest
	b.Fork.RestoreManyFn = func(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error) {
		many = req
		return []api.Sandbox{backendtest.Sandbox("000000000001"), backendtest.Sandbox("000000000002"), backendtest.Sandbox("000000000003")}, nil
	}
	var timeout api.TimeoutRequest
	b.Fork.TimeoutFn = func(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error) {
		timeout = req
		s := backendtest.Sandbox(backendtest.SandboxID)
		exp := time.Date(2025, 1, 2, 5, 4, 5, 0, time.UTC)
		s.ExpiresAt = &exp
		return s, nil
	}
	d := snapshotDaemon(t, b)

	d.cli(t, nil, "restore", "--count", "3", "--name", "try", "before").check(t, 0, "000000000001\n000000000002\n000000000003\n", "")
	if many.Count != 3 || many.Name != "try" {
		t.Errorf("restore request %+v, want count 3, name try", many)
	}
	for _, n := range []string{"0", "-1", "65"} {
		if r := d.cli(t, nil, "restore", "--count", n, "before"); r.code != 125 || !strings.Contains(r.stderr, "--count "+n+": want 1 to 64 sandboxes") {
			t.Errorf("restore --count %s: %+v", n, r)
		}
	}
	d.cli(t, nil, "timeout", "work1", "2h").check(t, 0, "2025-01-02T05:04:05Z\n", "")
	if timeout.TimeoutSeconds != 7200 {
		t.Errorf("timeout request %+v, want 7200 s", timeout)
	}
	for _, bad := range []string{"0s", "500ms", "1.5s", "soon"} {
		if r := d.cli(t, nil, "timeout", "work1", bad); r.code != 125 || r.stderr == "" {
			t.Errorf("timeout %s: %+v", bad, r)
		}
	}
	if calls := strings.Join(b.Calls(), ","); strings.Count(calls, "SetTimeout") != 1 || strings.Count(calls, "RestoreSnapshots") != 1 {
		t.Errorf("backend calls %s: bad input reached it", calls)
	}
}
