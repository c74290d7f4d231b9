package daemon

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// TestSnapshotErrorsToAPI: the manager's snapshot errors keep their
// message and get the documented status and code.
func TestSnapshotErrorsToAPI(t *testing.T) {
	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{sandbox.ErrNoSpace, http.StatusInsufficientStorage, api.CodeInsufficientStorage},
		{sandbox.ErrSnapshotUnusable, http.StatusUnprocessableEntity, api.CodeSnapshotUnusable},
		{sandbox.ErrNoSnapshot, http.StatusNotFound, api.CodeNotFound},
		{sandbox.ErrSnapshotNameTaken, http.StatusConflict, api.CodeNameTaken},
		{sandbox.ErrSnapshotExists, http.StatusConflict, api.CodeNameTaken},
		{sandbox.ErrUnsupported, http.StatusNotImplemented, api.CodeNotImplemented},
		{sandbox.ErrNoWarmTemplate, http.StatusNotFound, api.CodeNotFound},
		{sandbox.ErrNotRunning, http.StatusConflict, api.CodeNotRunning},
		{sandbox.ErrNameTaken, http.StatusConflict, api.CodeNameTaken},
	} {
		err := fmt.Errorf("%w: what to do", c.err)
		got := api.ErrorFrom(err)
		if got.Status != c.status || got.Code != c.code || got.Message != err.Error() {
			t.Errorf("ErrorFrom(%v) = %d %s %q; want %d %s", err, got.Status, got.Code, got.Message, c.status, c.code)
		}
		if api.StatusOf(c.code) != c.status {
			t.Errorf("StatusOf(%s) = %d, want %d", c.code, api.StatusOf(c.code), c.status)
		}
	}
}

// TestSnapshotViewSourceRemoved: the view says whether the snapshotted
// sandbox is gone, and keeps its name.
func TestSnapshotViewSourceRemoved(t *testing.T) {
	r := sandbox.SnapshotRecord{ID: "0123456789ab", Name: "s", SandboxID: "ba9876543210", SandboxName: "orig", Extra: []byte(`{"limits":{"ttl_seconds":60}}`)}
	for _, removed := range []bool{false, true} {
		v := snapshotView(r, removed)
		if v.SourceRemoved != removed || v.SandboxName != "orig" || v.Sandbox != r.SandboxID || v.Limits.TTLSeconds != 60 {
			t.Errorf("snapshotView(removed=%v) = %+v", removed, v)
		}
	}
}
