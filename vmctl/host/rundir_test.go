package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// fakeDomains is a Domains over a set of running domain names.
type fakeDomains struct {
	running   map[string]bool
	destroyed []string
}

func (f *fakeDomains) ListDomains(context.Context) ([]sandbox.DomainStatus, error) {
	var out []sandbox.DomainStatus
	for name := range f.running {
		out = append(out, sandbox.DomainStatus{Name: name, Running: true})
	}
	return out, nil
}

func (f *fakeDomains) DestroyDomain(_ context.Context, name string) error {
	f.destroyed = append(f.destroyed, name)
	delete(f.running, name)
	return nil
}

// TestSweep: a run whose process is gone (its lock free) is removed with
// its domain and runtime dir, and named; a live run (lock held, here by
// another process) and a kept run are left alone.
func TestSweep(t *testing.T) {
	state, runtime := t.TempDir(), t.TempDir()
	dead, err := newRunDir(state, runtime, "00000000000000de")
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dead.Dir, "sandboxes", "abcdefabcdef"), 0o700)
	os.WriteFile(filepath.Join(dead.RuntimeDir, "abcdefabcdef.sock"), nil, 0o600)
	dead.lock.Close() // the process died: its lock is free, its files remain

	kept, err := newRunDir(state, runtime, "00000000000000ee")
	if err != nil {
		t.Fatal(err)
	}
	kept.Keep("virsh destroy ...")
	kept.lock.Close()

	alive, err := newRunDir(state, runtime, "00000000000000ff")
	if err != nil {
		t.Fatal(err)
	}
	alive.lock.Close()
	// The live run's process holds its lock: flock locks belong to an open
	// file description, so one opened here conflicts with the sweep's own
	// open of the file as another process's would.
	holder, err := os.Open(filepath.Join(alive.Dir, lockFile))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Close() })
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}

	drv := &fakeDomains{running: map[string]bool{"agentbox-abcdefabcdef": true, "agentbox-other": true}}
	lines := Sweep(t.Context(), state, drv)
	want := "removed what the in-process run 00000000000000de left behind (its process is gone): domain agentbox-abcdefabcdef, runtime dir " + dead.RuntimeDir + ", dir " + dead.Dir
	if len(lines) != 1 || lines[0] != want {
		t.Fatalf("sweep said %q, want [%q]", lines, want)
	}
	if !slices.Equal(drv.destroyed, []string{"agentbox-abcdefabcdef"}) || !drv.running["agentbox-other"] {
		t.Errorf("destroyed %v", drv.destroyed)
	}
	for _, p := range []string{dead.Dir, dead.RuntimeDir} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there: %v", p, err)
		}
	}
	for _, p := range []string{kept.Dir, kept.RuntimeDir, alive.Dir, alive.RuntimeDir} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("swept %s: %v", p, err)
		}
	}
	if lines := Sweep(t.Context(), state, drv); len(lines) != 0 {
		t.Errorf("second sweep: %q", lines)
	}
}

// TestRunDirClose: a run's own Close removes its directories unless it is
// kept or asked to keep its files.
func TestRunDirClose(t *testing.T) {
	state, runtime := t.TempDir(), t.TempDir()
	r, err := newRunDir(state, runtime, "0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	// A live run's lock is not free, not even to this process.
	if f, ok := tryLock(filepath.Join(r.Dir, lockFile)); ok {
		f.Close()
		t.Fatal("a live run's lock could be taken")
	}
	if err := r.Close(false); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(runtime); len(ents) != 0 {
		t.Errorf("runtime dir left: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(state, runsDir)); len(ents) != 0 {
		t.Errorf("run dir left: %v", ents)
	}

	k, err := newRunDir(state, runtime, "0000000000000002")
	if err != nil {
		t.Fatal(err)
	}
	k.Keep("rm -rf it")
	if err := k.Close(false); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(k.Dir, keptFile)); err != nil || string(b) != "rm -rf it\n" {
		t.Errorf("kept run: %q, %v", b, err)
	}
}
