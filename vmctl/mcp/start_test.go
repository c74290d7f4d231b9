package mcp_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// TestStartFailure: a command that cannot start says why, in run_command's
// and start_process's answers (the API's ExitStatus.Error), beside exit
// code 127.
func TestStartFailure(t *testing.T) {
	const why = "no-such-cmd: command not found"
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			return api.ExitStatus{ExitCode: 127, Error: why}, nil
		},
		StartProcessFn: func(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
			p := backendtest.Process("p1")
			p.State, p.Exit = api.ProcessExited, &api.ExitStatus{ExitCode: 127, Error: why}
			return p, nil
		},
	}
	h := newHarness(t, b, mcp.Config{})
	var out mcp.RunCommandOutput
	res := h.call(t, "run_command", map[string]any{"sandbox": "w1", "argv": []string{"no-such-cmd"}}, &out)
	if out.ExitCode != 127 || out.Error != why || out.Stderr != "" {
		t.Fatalf("run_command: %+v", out)
	}
	if txt := text(res); !strings.Contains(txt, `"error":"`+why+`"`) {
		t.Fatalf("run_command's text does not say why: %s", txt)
	}
	var pi mcp.ProcessInfo
	h.call(t, "start_process", map[string]any{"sandbox": "w1", "argv": []string{"no-such-cmd"}}, &pi)
	if pi.State != api.ProcessExited || pi.ExitCode == nil || *pi.ExitCode != 127 || pi.Error != why {
		t.Fatalf("start_process: %+v", pi)
	}
}
