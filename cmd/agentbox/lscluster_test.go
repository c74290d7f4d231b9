package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TestLsNodeColumn: a cluster's list (sandboxes with a node) gets a NODE
// column, and a sandbox of a node that does not answer shows only what
// the directory knows.
func TestLsNodeColumn(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	sbs := []api.Sandbox{
		{ID: "000000abc001", Name: "w1", Node: "h1", State: api.StateRunning, Image: api.ImageRef{Name: "debian"}, VCPUs: 1, MemoryMiB: 256, CreatedAt: now.Add(-time.Minute)},
		{ID: "000000abc002", Node: "h3", State: api.StateUnknown, Reason: api.CodeNodeUnreachable},
	}
	var out bytes.Buffer
	if err := writeSandboxTable(&out, sbs, now); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"ID            NAME  NODE  STATE    IMAGE   TEMPLATE  CPUS  MEMORY  AGE\n" +
		"000000abc001  w1    h1    running  debian  -         1     256MiB  1m\n" +
		"000000abc002  -     h3    unknown  -       -         -     -       -\n"
	if out.String() != want {
		t.Errorf("table =\n%s\nwant\n%s", out.String(), want)
	}
}
