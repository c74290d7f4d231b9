package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// failStartDriver is the fake driver whose StartDomain fails.
type failStartDriver struct {
	*fakeDriver
	err error
}

func (d failStartDriver) StartDomain(context.Context, domain.Spec) error { return d.err }

// A Create whose domain does not start names the step and leaves nothing
// behind: no directory, no registry entry, no stored record.
func TestCreateDomainFailsLeavesNothing(t *testing.T) {
	fd := newFakeDriver(t)
	errStart := errors.New("qemu refused")
	f := newFakeFixture(t, failStartDriver{fd, errStart}, fd)
	_, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "doomed", BootTimeout: 10 * time.Second})
	if !errors.Is(err, errStart) || !strings.Contains(err.Error(), "create step domain:") {
		t.Fatalf("create = %v, want the driver's error after %q", err, "create step domain:")
	}
	entries, err := os.ReadDir(filepath.Join(f.state, "sandboxes"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("sandbox dirs left after a failed create: %v", entries)
	}
	if list := f.mgr.List(); len(list) != 0 {
		t.Errorf("List after a failed create: %d sandboxes, want none", len(list))
	}
	if recs, err := f.st.Sandboxes(); err != nil || len(recs) != 0 {
		t.Errorf("stored records after a failed create: %+v (err %v), want none", recs, err)
	}
	if _, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "doomed", BootTimeout: 10 * time.Second}); !errors.Is(err, errStart) {
		t.Errorf("second create under the same name: %v, want the driver's error (the name was released)", err)
	}
}

// The exec accounting comes from the Extra StepRegister records, even when
// something read it before (a first read must not keep an empty account),
// and the idle clock starts when the sandbox runs.
func TestExecAccountSetAtRegister(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	b, err := f.mgr.NewBuild(sandbox.Shape{Image: f.img, Accel: tcg, VCPUs: 1, MemoryMiB: 128})
	if err != nil {
		t.Fatal(err)
	}
	if a := b.Sandbox.ExecAccount(); a.Limits.MaxExecs != 0 {
		t.Fatalf("account before register: %+v", a)
	}
	want := sandbox.ExecAccount{Limits: sandbox.ExecLimits{MaxExecs: 3, IdleTimeoutSeconds: 30}, Creator: "alice"}
	if err := b.Run(t0, "create", sandbox.StepRegister(sandbox.Admission{Name: "acct", Extra: want.Encode()})); err != nil {
		t.Fatal(err)
	}
	if a := b.Sandbox.ExecAccount(); a.Limits != want.Limits || a.Creator != "alice" || !a.LastActivity.IsZero() {
		t.Errorf("account after register: %+v; want %+v, no activity before the start", a, want)
	}
	if err := b.Abort(t0); err != nil {
		t.Fatal(err)
	}

	sb := f.create(t, "ran")
	defer f.mgr.Destroy(t0, sb)
	if a, r := sb.ExecAccount(), sb.Record(); r.StartedAt.IsZero() || !a.LastActivity.Equal(r.StartedAt) {
		t.Errorf("last activity %v of a new sandbox, want its start %v", a.LastActivity, r.StartedAt)
	}
}
