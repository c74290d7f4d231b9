package cgroup

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRemoveLeftovers: on a fake v1 root, the empty pids groups of
// agentbox's domains that no longer run are removed; a running domain's
// group, a group in use (a fake one with a file in it), other domains'
// groups, libvirt's groups of other controllers and groups deeper than
// the sweep looks stay. live is asked after the groups were read.
func TestRemoveLeftovers(t *testing.T) {
	root := t.TempDir()
	pids := filepath.Join(root, "pids")
	mk := func(rel string) string {
		t.Helper()
		dir := filepath.Join(pids, filepath.FromSlash(rel))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	gone := mk("machine/qemu-21-agentbox-566c80cbd8c2.libvirt-qemu")
	goneNested := mk("machine/part/qemu-3-agentbox-0123456789ab.libvirt-qemu")
	running := mk("machine/qemu-556-agentbox-217a2a10e07d.libvirt-qemu")
	busy := mk("machine/qemu-23-agentbox-b9d2fefcf979.libvirt-qemu")
	touch(t, filepath.Join(busy, "cgroup.procs"), "42\n") // rmdir fails like EBUSY
	other := mk("machine/qemu-7-otherdomain.libvirt-qemu")
	notLibvirt := mk("machine/agentbox-566c80cbd8c2")
	tooDeep := mk("a/b/c/qemu-9-agentbox-aaaaaaaaaaaa.libvirt-qemu")
	memory := filepath.Join(root, "memory", "machine", "qemu-21-agentbox-566c80cbd8c2.libvirt-qemu")
	if err := os.MkdirAll(memory, 0o755); err != nil {
		t.Fatal(err)
	}

	no := false
	asked := 0
	removed, err := RemoveLeftovers(Options{Root: root, Unified: &no},
		func(name string) bool { return strings.HasPrefix(name, "agentbox-") },
		func() (map[string]bool, error) {
			asked++
			return map[string]bool{"agentbox-217a2a10e07d": true}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{goneNested, gone}; !slices.Equal(removed, want) { // sorted
		t.Errorf("removed %v, want %v", removed, want)
	}
	if asked != 1 {
		t.Errorf("live asked %d times, want once", asked)
	}
	for _, dir := range []string{gone, goneNested} {
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", dir, err)
		}
	}
	for _, dir := range []string{running, busy, other, notLibvirt, tooDeep, memory, filepath.Join(pids, "machine")} {
		if _, err := os.Stat(dir); err != nil {
			t.Errorf("%s was touched: %v", dir, err)
		}
	}

	// Nothing left to remove: live is not asked; its error is reported
	// when it is.
	if removed, err := RemoveLeftovers(Options{Root: root, Unified: &no}, func(string) bool { return false },
		func() (map[string]bool, error) { t.Fatal("live asked without a candidate"); return nil, nil }); err != nil || len(removed) != 0 {
		t.Errorf("RemoveLeftovers without candidates = %v, %v", removed, err)
	}
	mk("machine/qemu-22-agentbox-566c80cbd8c2.libvirt-qemu")
	if _, err := RemoveLeftovers(Options{Root: root, Unified: &no}, func(string) bool { return true },
		func() (map[string]bool, error) { return nil, errors.New("libvirt down") }); err == nil || !strings.Contains(err.Error(), "libvirt down") {
		t.Errorf("RemoveLeftovers with live failing = %v", err)
	}

	// v2 and a root without a pids hierarchy: nothing to do.
	yes := true
	if removed, err := RemoveLeftovers(Options{Root: root, Unified: &yes}, func(string) bool { return true },
		func() (map[string]bool, error) { return nil, nil }); err != nil || len(removed) != 0 {
		t.Errorf("RemoveLeftovers on v2 = %v, %v", removed, err)
	}
	if removed, err := RemoveLeftovers(Options{Root: t.TempDir(), Unified: &no}, func(string) bool { return true },
		func() (map[string]bool, error) { return nil, nil }); err != nil || len(removed) != 0 {
		t.Errorf("RemoveLeftovers without pids = %v, %v", removed, err)
	}
}
