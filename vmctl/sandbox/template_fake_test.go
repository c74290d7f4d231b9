package sandbox_test

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// A sandbox keeps the template it was created from in its durable record;
// a build from another record (a restore, a warm create) starts without
// the source's and gets only its own.
func TestTemplateInRecord(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "tpl", Template: "base", BootTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer f.mgr.Destroy(t0, sb)
	if got := sb.Record().Template; got != "base" {
		t.Errorf("record template %q, want base", got)
	}
	recs, err := f.st.Sandboxes()
	if err != nil || len(recs) != 1 || recs[0].Template != "base" {
		t.Errorf("stored records %+v (%v), want one with template base", recs, err)
	}

	from := sb.Record()
	b, err := f.mgr.NewBuild(sandbox.Shape{Image: f.img, Accel: tcg, VCPUs: 1, MemoryMiB: 128, From: &from})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Sandbox.Record().Template; got != "" {
		t.Errorf("a build from a record starts with template %q, want none", got)
	}
	if err := b.Run(t0, "create", sandbox.StepRegister(sandbox.Admission{Name: "warm1", Template: "python"})); err != nil {
		t.Fatal(err)
	}
	if got := b.Sandbox.Record().Template; got != "python" {
		t.Errorf("template after register %q, want python", got)
	}
	if err := b.Abort(t0); err != nil {
		t.Fatal(err)
	}
}
