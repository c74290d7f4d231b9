package daemon

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// TestCreateArgsRecordEverySetting: the create audit entry's arguments
// name every setting a request carried (each field of the request and of
// its limits, by its JSON name), so a refused create is audited with what
// was asked too.
func TestCreateArgsRecordEverySetting(t *testing.T) {
	req := api.CreateSandboxRequest{
		Image: "/img", Template: "base", Name: "n", VCPUs: 2, MemoryMiB: 512, Accel: "tcg", BootTimeoutMs: 1000,
		Labels: map[string]string{"k": "v"}, Warm: true, Priority: api.PriorityHigh,
		Limits:  api.Limits{TTLSeconds: 1, IdleTimeoutSeconds: 2, ExecTimeoutMs: 3, MaxExecs: 4, IdleAction: "pause-to-disk", PausedTTLSeconds: 5, TTLAction: "pause"},
		Env:     []string{"SECRET=v"},
		Network: &api.NetworkPolicy{Mode: "allowlist", Allow: []string{"example.com"}},
		DiskMiB: 6, CPUQuotaPercent: 7, IOBps: 8 << 20, IOPS: 9, IOWeight: 100, Pids: 64, NetBps: 1 << 20,
		Secrets: []api.SecretSpec{{Name: "API_KEY", Value: "real-value", Hosts: []string{"example.com", "b.example.com"}}},
	}
	args := createArgs(req)
	var want []string
	for _, v := range []any{req, req.Limits} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if name != "limits" {
				want = append(want, name)
			}
		}
	}
	for _, k := range want {
		if _, ok := args[k]; !ok {
			t.Errorf("create audit args lack %q: %v", k, args)
		}
	}
	if args["idle_action"] != "pause-to-disk" || args["paused_ttl_seconds"] != int64(5) || args["net_bps"] != int64(1<<20) || args["network"] != "allowlist[example.com]" {
		t.Errorf("create audit args %v", args)
	}
	if !reflect.DeepEqual(args["env"], []string{"SECRET"}) || args["ttl_action"] != "pause" {
		t.Errorf("create audit args keep env %v (want the keys only), ttl_action %v", args["env"], args["ttl_action"])
	}
	if !reflect.DeepEqual(args["secrets"], []string{"API_KEY→example.com,b.example.com"}) {
		t.Errorf("create audit args: secrets %v, want names and hosts only", args["secrets"])
	}
	if got := createArgs(api.CreateSandboxRequest{Image: "/img"}); len(got) != 1 {
		t.Errorf("args of a request with the image only: %v, want the image alone", got)
	}
}

// TestRequestEntry: every entry of a request's action carries its
// caller, its tenant (also without a sandbox: a refused create or
// restore), its duration and its error's API code and message.
func TestRequestEntry(t *testing.T) {
	c := &core{}
	ctx := tenant.With(api.WithCaller(context.Background(), api.Caller{ID: "tenant:a"}), &tenant.Tenant{Name: "a"})
	start := time.Now().Add(-1500 * time.Millisecond)
	e := c.requestEntry(ctx, "", audit.ActionRestore, map[string]any{"snapshot": "s"}, start, sandbox.ErrNotFound.WithMessage("no snapshot \"s\""))
	if e.Caller != "tenant:a" || e.Tenant != "a" || e.Action != audit.ActionRestore || e.DurationMs < 1500 || !e.Time.Equal(start) || e.Time.Location() != time.UTC {
		t.Errorf("entry %+v", e)
	}
	if e.Error != api.CodeNotFound || e.ErrorMessage != `no snapshot "s"` {
		t.Errorf("entry error %q %q, want not_found and the message", e.Error, e.ErrorMessage)
	}
	if e := c.requestEntry(context.Background(), "", audit.ActionCreate, nil, start, nil); e.Tenant != "" || e.Error != "" || e.Policy != nil {
		t.Errorf("the admin's entry without error: %+v", e)
	}
}
