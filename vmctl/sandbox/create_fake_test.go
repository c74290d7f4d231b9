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
