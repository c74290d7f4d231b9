package resources

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/vmctl/cgroup"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// listDriver is a sandbox.UsageDriver that only lists domains.
type listDriver struct {
	sandbox.Driver
	sandbox.UsageDriver
	doms []sandbox.DomainStatus
}

func (d listDriver) ListDomains(context.Context) ([]sandbox.DomainStatus, error) { return d.doms, nil }

// TestReconcilingRemovesLeftoverCgroups: the start-up hook removes the
// pids groups of agentbox domains that no longer run (a domain that is
// listed but shut off counts as gone) and reports each; the groups of a
// running agentbox domain and of another domain stay.
func TestReconcilingRemovesLeftoverCgroups(t *testing.T) {
	root := t.TempDir()
	machine := filepath.Join(root, "pids", "machine")
	dir := func(name string) string {
		d := filepath.Join(machine, "qemu-"+name+".libvirt-qemu")
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	gone, off := dir("12-agentbox-aaaaaaaaaaaa"), dir("13-agentbox-bbbbbbbbbbbb")
	running, other := dir("14-agentbox-cccccccccccc"), dir("15-vm1")
	e := New(listDriver{doms: []sandbox.DomainStatus{
		{Name: "agentbox-bbbbbbbbbbbb", Running: false},
		{Name: "agentbox-cccccccccccc", Running: true},
	}}, slog.New(slog.DiscardHandler))
	no := false
	e.cgroups = cgroup.Options{Root: root, Unified: &no}
	var rep sandbox.Report
	e.Reconciling(context.Background(), nil, &rep)
	slices.Sort(rep.Cleaned)
	if want := []string{"cgroup " + gone, "cgroup " + off}; !slices.Equal(rep.Cleaned, want) {
		t.Errorf("cleaned %q, want %q", rep.Cleaned, want)
	}
	for _, d := range []string{gone, off} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", d, err)
		}
	}
	for _, d := range []string{running, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}

	// A driver without usage (a fake one): nothing is touched.
	again := dir("16-agentbox-dddddddddddd")
	e = New(struct{ sandbox.Driver }{listDriver{}}, slog.New(slog.DiscardHandler))
	e.cgroups = cgroup.Options{Root: root, Unified: &no}
	rep = sandbox.Report{}
	e.Reconciling(context.Background(), nil, &rep)
	if _, err := os.Stat(again); err != nil || len(rep.Cleaned) != 0 {
		t.Errorf("with a driver without usage: cleaned %q, group %v; want nothing touched", rep.Cleaned, err)
	}
}
