package mcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// TestAgentErrors: errors speak of the tools and their arguments, never
// of the CLI's commands, the REST API's parameters, implementation steps
// or temporary files; every error has the "CODE: message" form, the
// SDK's own argument errors too.
func TestAgentErrors(t *testing.T) {
	var perm fs.FileMode
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			return api.ExitStatus{}, api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox %q: `agentbox ls` lists them", ref)
		},
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			return api.Sandbox{}, api.Errorf(http.StatusTooManyRequests, api.CodeCapacity,
				"create step register: host capacity exceeded: the sandbox needs 512 MiB and 1 vCPUs; 3584 of 4096 MiB and 7 of 8 vCPUs are committed: remove sandboxes, ask for less, or raise --capacity-memory/--capacity-vcpus")
		},
		UploadFn: func(ctx context.Context, ref string, req api.UploadRequest, r io.Reader) (api.FileInfo, error) {
			p, mode := req.Path, req.Mode
			io.Copy(io.Discard, r)
			if p == "/work/x/hello.txt" {
				return api.FileInfo{}, fmt.Errorf("agent: write %s: %w", p, &agentproto.Error{Code: agentproto.CodeNotFound,
					Message: "directory /work/x does not exist: create it first, or write with parents"})
			}
			perm = mode
			return api.FileInfo{Name: "f", Path: p, Type: "file", Mode: api.FormatMode(mode), ModTime: backendtest.Epoch}, nil
		},
		AuditFn: func(ctx context.Context, ref string, emit func(audit.Entry) error) error {
			return api.Errorf(http.StatusNotFound, api.CodeNotFound, "no sandbox %q: `agentbox ls` lists them", ref)
		},
		GetProcessFn: func(ctx context.Context, ref, pid string) (api.Process, error) {
			p := backendtest.Process(pid)
			p.OutputBytes = 18
			return p, nil
		},
	}
	h := newHarness(t, b, mcp.Config{DefaultImage: "/img"})
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_command", map[string]any{"sandbox": "gone", "command": "true"},
			`not_found: no sandbox "gone": list_sandboxes lists them (with all: true, those of other sessions too)`},
		{"list_directory", map[string]any{"sandbox": "w1", "path": "work"},
			`invalid_argument: path "work" is relative: give an absolute guest path (starting with /)`},
		{"create_sandbox", map[string]any{},
			"capacity_exceeded: host capacity exceeded: the sandbox needs 512 MiB and 1 vCPUs; 3584 of 4096 MiB and 7 of 8 vCPUs are committed: " +
				"destroy sandboxes you no longer need (destroy_sandbox), ask for less (cpus, memory_mib), or have the daemon's operator raise --capacity-memory/--capacity-vcpus"},
		{"write_file", map[string]any{"sandbox": "w1", "path": "/work/x/hello.txt", "content": "hi"},
			"not_found: write /work/x/hello.txt: directory /work/x does not exist: create it first, or pass parents: true"},
		{"read_process_output", map[string]any{"sandbox": "w1", "process": "p1", "offset": 19},
			"invalid_argument: offset 19 is past the end of the process's output (18 bytes so far): give 0 or the next_offset of the previous read"},
		{"read_process_output", map[string]any{"sandbox": "w1", "process": "p1", "wait_seconds": 100},
			"invalid_argument: wait_seconds is 100: give 0 to 60 (call again to wait longer)"},
		{"run_command", map[string]any{"command": "true"},
			`invalid_argument: the arguments do not fit the tool's input schema: required: missing properties: ["sandbox"]`},
		{"write_file", map[string]any{"sandbox": "w1", "path": "/f", "content": "", "mode": "800"},
			`invalid_argument: mode "800" is not an octal permission such as 0644 (0 to 07777)`},
	} {
		if got := h.callErr(t, c.tool, c.args); got != c.want {
			t.Errorf("%s %v:\n got %s\nwant %s", c.tool, c.args, got, c.want)
		}
	}
	if got := h.callErr(t, "write_file", map[string]any{"sandbox": "w1", "path": "/f", "content": "", "mode": true}); !strings.HasPrefix(got, "invalid_argument: the arguments do not fit the tool's input schema: ") {
		t.Errorf("write_file with mode true: %s", got)
	}

	// mode: octal digits as a string or as a number.
	for _, mode := range []any{"0600", "600", 600} {
		perm = 0
		h.call(t, "write_file", map[string]any{"sandbox": "w1", "path": "/f", "content": "", "mode": mode}, nil)
		if perm != 0o600 {
			t.Errorf("mode %#v: %v, want 0600", mode, perm)
		}
	}

	// A missing sandbox's resource is the SDK's resource-not-found error,
	// its message in the "CODE: message" form.
	_, err := h.cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: "agentbox://sandboxes/gone/audit"})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != sdk.CodeResourceNotFound ||
		we.Message != `not_found: no sandbox "gone": list_sandboxes lists them (with all: true, those of other sessions too)` {
		t.Errorf("resource of a missing sandbox: %#v", err)
	}
}

// TestRunCommandCutFields: stdout_cut_bytes and stderr_cut_bytes are in
// every answer, 0 when nothing was cut, as the docs say.
func TestRunCommandCutFields(t *testing.T) {
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			stdout.Write([]byte("ok\n"))
			return api.ExitStatus{}, nil
		},
	}
	h := newHarness(t, b, mcp.Config{})
	res := h.call(t, "run_command", map[string]any{"sandbox": "w1", "command": "echo ok"}, nil)
	var m map[string]any
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &m)
	if m["stdout_cut_bytes"] != float64(0) || m["stderr_cut_bytes"] != float64(0) {
		t.Fatalf("answer %s: want stdout_cut_bytes and stderr_cut_bytes 0", raw)
	}
}
