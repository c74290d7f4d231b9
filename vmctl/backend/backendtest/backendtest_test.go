package backendtest_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// The fake is the whole contract: Backend and every capability.
var (
	_ backend.Backend                = (*backendtest.Fake)(nil)
	_ backend.ForkBackend            = (*backendtest.Fake)(nil)
	_ backend.LifecycleBackend       = (*backendtest.Fake)(nil)
	_ backend.NodeBackend            = (*backendtest.Fake)(nil)
	_ backend.PortBackend            = (*backendtest.Fake)(nil)
	_ backend.ProcessTerminalBackend = (*backendtest.Fake)(nil)
	_ backend.SnapshotBackend        = (*backendtest.Fake)(nil)
	_ backend.TemplateBackend        = (*backendtest.Fake)(nil)
	_ backend.TimeoutBackend         = (*backendtest.Fake)(nil)
	_ backend.WarmBackend            = (*backendtest.Fake)(nil)
	_ backend.WatchBackend           = (*backendtest.Fake)(nil)
	_ backend.ExecControl            = (*backendtest.Control)(nil)
)

// A zero Fake answers fixtures and records its calls; a function field
// takes precedence.
func TestFixtures(t *testing.T) {
	b := &backendtest.Fake{}
	sb, err := b.GetSandbox(t.Context(), "work1")
	if err != nil || sb.ID != backendtest.SandboxID || sb.State != api.StateRunning {
		t.Fatalf("GetSandbox: %+v, %v", sb, err)
	}
	b.StopSandboxFn = func(context.Context, string) (api.Sandbox, error) { return api.Sandbox{}, errors.New("refused") }
	if _, err := b.StopSandbox(t.Context(), "work1"); err == nil || err.Error() != "refused" {
		t.Errorf("StopSandbox with StopSandboxFn: %v", err)
	}
	if got, want := b.Calls(), []string{"GetSandbox work1", "StopSandbox work1"}; !slices.Equal(got, want) {
		t.Errorf("Calls %q, want %q", got, want)
	}
}

// A Fake from NewMemory keeps what it is given: a created sandbox is
// listed, runs the scripted commands, keeps an uploaded file, resolves
// templates and is gone after its delete.
func TestMemory(t *testing.T) {
	ctx := t.Context()
	b := backendtest.NewMemory()
	sb, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "/img", Name: "w1"})
	if err != nil || sb.ID != "000000abc001" || sb.State != api.StateRunning {
		t.Fatalf("CreateSandbox: %+v, %v", sb, err)
	}
	if _, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "/img", Name: "w1"}); !api.HasCode(err, api.CodeNameTaken) {
		t.Errorf("second create of w1: %v, want name_taken", err)
	}
	if _, err := b.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "nope"}); !api.HasCode(err, api.CodeTemplateNotFound) || !strings.Contains(err.Error(), "serves base, python") {
		t.Errorf("create of an unknown template: %v", err)
	}

	var stdout, stderr bytes.Buffer
	var execID string
	st, err := b.Exec(ctx, "w1", api.ExecRequest{Cmd: []string{"out", "hi\n", "oops\n", "3"}}, func(id string, _ int) { execID = id }, &stdout, &stderr)
	if err != nil || st.ExitCode != 3 || execID == "" || stdout.String() != "hi\n" || stderr.String() != "oops\n" {
		t.Errorf("Exec out: %+v, %v, started %q, stdout %q, stderr %q", st, err, execID, stdout.String(), stderr.String())
	}

	if _, err := b.Upload(ctx, "w1", api.UploadRequest{Path: "/work/a.txt", Mode: 0o600}, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	if data, mode, ok := b.Memory.File(sb.ID, "/work/a.txt"); !ok || string(data) != "data" || mode != 0o600 {
		t.Errorf("File: %q, %o, %t", data, mode, ok)
	}
	if list, err := b.List(ctx, "w1", "/work", 1); err != nil || len(list) != 1 || list[0].Name != "a.txt" {
		t.Errorf("List /work: %+v, %v", list, err)
	}

	if err := b.DeleteSandbox(ctx, "w1", false); !api.HasCode(err, api.CodeSandboxRunning) {
		t.Errorf("delete of a running sandbox without force: %v", err)
	}
	if err := b.DeleteSandbox(ctx, "w1", true); err != nil {
		t.Fatal(err)
	}
	if list, err := b.ListSandboxes(ctx, nil, ""); err != nil || len(list) != 0 {
		t.Errorf("ListSandboxes after the delete: %+v, %v", list, err)
	}
	if got := len(b.Memory.Creates()); got != 3 {
		t.Errorf("%d creates recorded, want 3", got)
	}
	if got := b.Memory.Deletes(); !slices.Equal(got, []string{"w1 force=false", "w1 force=true"}) {
		t.Errorf("deletes %q", got)
	}
}

// Calls merges the calls of the Fake and of its fixture-only parts in
// call order; Reset forgets them all.
func TestCallsAcrossParts(t *testing.T) {
	ctx := t.Context()
	b := &backendtest.Fake{}
	b.GetSandbox(ctx, "a")
	b.SaveSnapshot(ctx, "b", api.SaveSnapshotRequest{Name: "s"})
	b.ListTemplates(ctx)
	b.ForwardPort(ctx, "c", api.PortForwardRequest{GuestPort: 80})
	b.DrainNode(ctx, "h1", true)
	b.DeleteWarm(ctx, backendtest.WarmKey)
	b.StopSandbox(ctx, "d")
	want := []string{"GetSandbox a", "SaveSnapshot b", "ListTemplates ", "ForwardPort c", "DrainNode h1", "DeleteWarm " + backendtest.WarmKey, "StopSandbox d"}
	if got := b.Calls(); !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
	b.Reset()
	if got := b.Calls(); got != nil {
		t.Fatalf("calls after Reset: %q, want none", got)
	}
}
