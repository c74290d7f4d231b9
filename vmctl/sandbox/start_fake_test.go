package sandbox_test

import (
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// TestStartRefusedByStateFake: a stopped sandbox whose image changed, or
// whose disk is gone, is not started, with a clear message and a
// precondition error (422 through the API's table), not an invalid
// argument (400): the request is fine, the sandbox's state is not.
func TestStartRefusedByStateFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb := f.create(t, "cold")
	defer f.mgr.Destroy(t0, sb)
	if err := f.mgr.Stop(t0, sb, "test"); err != nil {
		t.Fatal(err)
	}
	other := *f.img
	other.Digest = "d2"
	check := func(what string, err error, says string) {
		t.Helper()
		if !errors.Is(err, sandbox.ErrCannotStart) || !errors.Is(err, errdefs.ErrFailedPrecondition) || errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("start %s: %v; want ErrCannotStart, a failed precondition", what, err)
		}
		if ae := api.ErrorFrom(err); ae.Status != http.StatusUnprocessableEntity {
			t.Errorf("start %s answers %d %s, want 422", what, ae.Status, ae.Code)
		}
		if err != nil && !strings.Contains(err.Error(), says) {
			t.Errorf("start %s: %q does not say %q", what, err, says)
		}
		if st := sb.State(); st != sandbox.StateStopped {
			t.Errorf("after the refused start %s the sandbox is %s, want stopped", what, st)
		}
	}
	check("on another image", f.mgr.Start(t0, sb, sandbox.StartOptions{Image: &other}), "its disk only works on that image")
	if err := os.Remove(sb.Overlay); err != nil {
		t.Fatal(err)
	}
	check("without its disk", f.mgr.Start(t0, sb, sandbox.StartOptions{Image: f.img}), "is gone")
}
