package main

import (
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TestCLICreateEnvTTLAction: create --env sets the sandbox's default exec
// environment and --ttl-action what its TTL does, with --image and with
// --template; bad values are refused before anything is sent.
func TestCLICreateEnvTTLAction(t *testing.T) {
	d := startDaemon(t)
	img := t.TempDir()
	d.cli(t, nil, "create", "--image", img, "--env", "A=1", "-e", "B=x=y", "--ttl", "1h", "--ttl-action", "pause-to-disk").
		check(t, 125, "", "agentbox: Cannot use two forms of the same flag: e env: see `agentbox create --help`\n")
	d.cli(t, nil, "create", "--image", img, "--env", "A=1", "--env", "B=x=y", "--env", "EMPTY=", "--ttl", "1h", "--ttl-action", "pause-to-disk").
		check(t, 0, "000000abc001\n", "")
	want := api.CreateSandboxRequest{Image: img, Accel: "auto", BootTimeoutMs: 120000, Env: []string{"A=1", "B=x=y", "EMPTY="},
		Limits: api.Limits{TTLSeconds: 3600, TTLAction: api.IdleActionPauseToDisk}}
	if got := d.mem.Creates(); len(got) != 1 || !equalJSON(got[0], want) {
		t.Fatalf("create requests %+v, want %+v", got, want)
	}
	d.cli(t, nil, "create", "--template", "base", "-e", "K=V", "--ttl-action", "stop").check(t, 0, "000000abc002\n", "")
	if got := d.mem.Creates()[1]; got.Template != "base" || !equalJSON(got.Env, []string{"K=V"}) || got.Limits.TTLAction != api.IdleActionStop {
		t.Fatalf("create --template request %+v", got)
	}

	d.cli(t, nil, "create", "--image", img, "--env", "NOVALUE").check(t, 125, "", "agentbox: --env \"NOVALUE\": want KEY=VALUE with a non-empty KEY\n")
	d.cli(t, nil, "create", "--image", img, "--env", "=v").check(t, 125, "", "agentbox: --env \"=v\": want KEY=VALUE with a non-empty KEY\n")
	d.cli(t, nil, "create", "--image", img, "--ttl-action", "explode").check(t, 125, "", "agentbox: --ttl-action \"explode\": use remove, stop, pause or pause-to-disk\n")
	if n := len(d.mem.Creates()); n != 2 {
		t.Fatalf("%d creates reached the daemon, want 2", n)
	}
}
