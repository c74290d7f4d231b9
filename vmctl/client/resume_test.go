package client_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
)

// TestResuming: a Resuming client asks every call that can resume a
// paused sandbox to (the daemon resumes first, then runs the call), the
// plain client none; calls that cannot resume are sent as before (the
// daemon refuses unknown query parameters, so a stray ?resume would fail
// them).
func TestResuming(t *testing.T) {
	b := &backendtest.Fake{}
	plain := start(t, b)
	ctx := context.Background()
	const ref = "work1"
	calls := []struct {
		method string // the backend method the call reaches
		do     func(c *client.Client) error
		before []string // backend calls the route makes first
	}{
		{method: "Exec", do: func(c *client.Client) error {
			_, err := c.Exec(ctx, ref, api.ExecRequest{Cmd: []string{"true"}}, nil, nil)
			return err
		}},
		{method: "ExecInteractive", do: func(c *client.Client) error {
			_, err := c.ExecInteractive(ctx, ref, api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader("x"), &bytes.Buffer{}, nil)
			return err
		}, before: []string{"GetSandbox " + ref}}, // the WebSocket route checks the sandbox before the upgrade
		{method: "StartProcess", do: func(c *client.Client) error {
			_, err := c.StartProcess(ctx, ref, api.ExecRequest{Cmd: []string{"sleep", "1"}})
			return err
		}},
		{method: "WriteStdin", do: func(c *client.Client) error {
			_, err := c.WriteStdin(ctx, ref, "e1", strings.NewReader("x"), false)
			return err
		}},
		{method: "KillProcess", do: func(c *client.Client) error { return c.KillProcess(ctx, ref, "e1", "TERM") }},
		{method: "Upload", do: func(c *client.Client) error {
			_, err := c.Upload(ctx, ref, "/tmp/a", strings.NewReader("x"), 0o644, false)
			return err
		}},
		{method: "Download", do: func(c *client.Client) error {
			_, err := c.Download(ctx, ref, "/etc/hostname", &bytes.Buffer{})
			return err
		}},
		{method: "Stat", do: func(c *client.Client) error { _, err := c.Stat(ctx, ref, "/etc"); return err }},
		{method: "List", do: func(c *client.Client) error { _, err := c.List(ctx, ref, "/etc"); return err }},
		{method: "Mkdir", do: func(c *client.Client) error { return c.Mkdir(ctx, ref, api.MkdirRequest{Path: "/tmp/d"}) }},
		{method: "RemoveFile", do: func(c *client.Client) error { return c.RemoveFile(ctx, ref, "/tmp/a", false) }},
		{method: "ForwardPort", do: func(c *client.Client) error {
			_, err := c.ForwardPort(ctx, ref, api.PortForwardRequest{GuestPort: 8000})
			return err
		}},
	}
	resuming := plain.Resuming()
	for _, c := range calls {
		b.Reset()
		if err := c.do(resuming); err != nil {
			t.Errorf("%s through a Resuming client: %v", c.method, err)
		}
		want := append(append([]string{"ResumeSandbox " + ref}, c.before...), c.method+" "+ref)
		if got := b.Calls(); !slices.Equal(got, want) {
			t.Errorf("Resuming %s: backend calls %q, want %q", c.method, got, want)
		}
		b.Reset()
		if err := c.do(plain); err != nil {
			t.Errorf("%s: %v", c.method, err)
		}
		want = append(slices.Clone(c.before), c.method+" "+ref)
		if got := b.Calls(); !slices.Equal(got, want) {
			t.Errorf("%s: backend calls %q, want %q", c.method, got, want)
		}
	}

	// Calls without ?resume are unchanged through a Resuming client.
	b.Reset()
	if _, err := resuming.GetSandbox(ctx, ref); err != nil {
		t.Error(err)
	}
	if _, err := resuming.ListPorts(ctx, ref); err != nil {
		t.Error(err)
	}
	if _, err := resuming.ProcessOutput(ctx, ref, "e1", 0, false, &bytes.Buffer{}, nil); err != nil {
		t.Error(err)
	}
	if got, want := b.Calls(), []string{"GetSandbox " + ref, "ListPorts " + ref, "ProcessOutput " + ref}; !slices.Equal(got, want) {
		t.Errorf("other calls through a Resuming client: %q, want %q", got, want)
	}
}
