package sandbox_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
)

// memFixture is a manager on the real libvirtd with its warm service
// (memory templates, the default), checked for leaks at the end.
type memFixture struct {
	*fixture
	ws    *warm.Service
	snaps *snapshot.Service
}

func newMemFixture(t testing.TB) *memFixture {
	t.Helper()
	base := newFixture(t, testenv.Image(t)) // its cleanup checks for leaks
	conn, err := libvirt.Connect(context.Background(), libvirt.Config{URI: testenv.URI()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	runtime := testenv.ShortTempDir(t)
	m, snaps, ws, err := newManager(sandbox.Config{Driver: libvirt.NewDriver(conn), StateDir: base.state, RuntimeDir: runtime})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.AssertNoLeaks(t, base.state, runtime) })
	base.mgr = m
	return &memFixture{base, ws, snaps}
}

// warm makes a warm sandbox of 256 MiB, destroyed at the end.
func (f *memFixture) warm(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := f.warmErr(t)
	if err != nil {
		t.Fatalf("warm create: %v", err)
	}
	return sb
}

func (f *memFixture) warmErr(t *testing.T) (*sandbox.Sandbox, error) {
	sb, err := f.ws.Create(context.Background(), sandbox.Options{Image: f.img, Accel: tcg, MemoryMiB: 256})
	if err == nil {
		t.Cleanup(func() { f.mgr.Destroy(context.Background(), sb) })
	}
	return sb, err
}

// template returns the only template's directory and manifest.
func (f *memFixture) template(t *testing.T) (string, map[string]any) {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(f.state, "warm", "*", "manifest.json"))
	if len(ms) != 1 {
		t.Fatalf("warm templates %v; want one", ms)
	}
	data, err := os.ReadFile(ms[0])
	if err != nil {
		t.Fatal(err)
	}
	var man map[string]any
	if err := json.Unmarshal(data, &man); err != nil {
		t.Fatal(err)
	}
	if man["memory"] == nil {
		t.Fatalf("template %s is not a memory template: %s", ms[0], data)
	}
	return filepath.Dir(ms[0]), man
}

func ramName(man map[string]any) string { return man["memory"].(map[string]any)["ram"].(string) }

// stateName is the device state file's name in a template's manifest.
func stateName(man map[string]any) string { return man["memory"].(map[string]any)["state"].(string) }

func sha(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestWarmMemoryTemplate: warm creates clone a memory template: exec
// works, the clock is the host's, identity and random state differ
// between clones, their files are their own, the template's RAM file and
// overlay stay byte-identical through 4 clones, and the clone's record
// says its domain is tainted by the passthrough.
func TestWarmMemoryTemplate(t *testing.T) {
	f := newMemFixture(t)
	a := f.warm(t)
	dir, man := f.template(t)
	ram, ovl := filepath.Join(dir, ramName(man)), filepath.Join(dir, "overlay.qcow2")
	ramSum, ovlSum := sha(t, ram), sha(t, ovl)
	b := f.warm(t)
	type ident struct{ host, mid, uuid string }
	var ids []ident
	for _, sb := range []*sandbox.Sandbox{a, b} {
		before := time.Now()
		out, _, st := sh(t, sb, "hostname; cat /etc/machine-id; cat /proc/sys/kernel/random/uuid; date +%s.%N", 30*time.Second)
		after := time.Now()
		l := strings.Fields(out)
		if st.Code != 0 || len(l) != 4 {
			t.Fatalf("exec in clone %s: %q %+v", sb.ID, out, st)
		}
		if l[0] != sb.Domain {
			t.Errorf("clone %s: hostname %q, want %q", sb.ID, l[0], sb.Domain)
		}
		// The guest read its clock between before and after (however
		// slow the exec): off by more than 2 s outside that is skew.
		secs, _ := strconv.ParseFloat(l[3], 64)
		if guest := time.Unix(0, int64(secs*1e9)); guest.Before(before.Add(-2*time.Second)) || guest.After(after.Add(2*time.Second)) {
			t.Errorf("clone %s: guest clock %s, outside the exec's %s..%s by more than 2 s", sb.ID, guest.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano))
		}
		ids = append(ids, ident{l[0], l[1], l[2]})
		if r := sb.Record(); r.Spec == nil || r.Spec.MemoryBackend == nil || r.Spec.MemoryBackend.File != ram || r.Spec.MemoryBackend.Shared {
			t.Errorf("clone %s: spec memory backend %+v; want the template's RAM file, private", sb.ID, r.Spec)
		}
	}
	if ids[0].host == ids[1].host || ids[0].mid == ids[1].mid || ids[0].uuid == ids[1].uuid {
		t.Errorf("two clones share hostname, machine-id or random uuid: %+v", ids)
	}
	sh(t, a, "echo only-a > /root/mine && sync", 30*time.Second)
	if out, _, _ := sh(t, b, "cat /root/mine 2>/dev/null || echo absent", 30*time.Second); strings.TrimSpace(out) != "absent" {
		t.Errorf("a file written in one clone shows in the other: %q", out)
	}
	c, d := f.warm(t), f.warm(t)
	for _, sb := range []*sandbox.Sandbox{c, d} {
		sh(t, sb, "dd if=/dev/urandom of=/root/x bs=1M count=8 2>/dev/null; sync", 60*time.Second)
	}
	for _, sb := range []*sandbox.Sandbox{a, b, c, d} {
		if err := f.mgr.Destroy(context.Background(), sb); err != nil {
			t.Fatal(err)
		}
	}
	if s := sha(t, ram); s != ramSum {
		t.Errorf("the template's RAM file changed while 4 clones ran")
	}
	if s := sha(t, ovl); s != ovlSum {
		t.Errorf("the template's overlay changed while 4 clones ran")
	}
}

// TestWarmMemoryTemplateRefused: a template whose clone key differs from
// the host's (here: the QEMU version it records) is rebuilt, never
// cloned; a damaged device state or RAM file fails the create cleanly
// (nothing left, the template removed) and the next warm create rebuilds
// it.
func TestWarmMemoryTemplateRefused(t *testing.T) {
	f := newMemFixture(t)
	f.warm(t)
	dir, man := f.template(t)
	first, firstState := ramName(man), stateName(man)

	// Another QEMU version in the key: rebuilt.
	man["memory"].(map[string]any)["key"].(map[string]any)["emulator"].(map[string]any)["version"] = 1
	data, _ := json.Marshal(man)
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	f.warm(t)
	_, man = f.template(t)
	if ramName(man) == first {
		t.Fatalf("a template with another QEMU version in its key was cloned; want it rebuilt")
	}
	// A clone loads the state file its template version names: one of a
	// rebuilt template is never loaded into a domain mapping the old RAM.
	if stateName(man) == firstState {
		t.Errorf("the rebuilt template's device state file has the old one's name %q; want a new name per build", firstState)
	}
	if _, err := os.Stat(filepath.Join(dir, first)); !os.IsNotExist(err) {
		t.Errorf("the refused template's RAM file is still there (%v)", err)
	}

	damage := map[string]func(dir string, man map[string]any) error{
		"state": func(dir string, man map[string]any) error {
			p := filepath.Join(dir, stateName(man))
			os.Chmod(p, 0o600)
			fh, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer fh.Close()
			_, err = fh.WriteAt([]byte("garbage"), 4096)
			return err
		},
		"ram": func(dir string, man map[string]any) error {
			return os.Truncate(filepath.Join(dir, ramName(man)), 1<<20)
		},
	}
	for _, what := range []string{"state", "ram"} {
		dir, man := f.template(t)
		if err := damage[what](dir, man); err != nil {
			t.Fatal(err)
		}
		before := len(f.mgr.List())
		_, err := f.warmErr(t)
		if !errors.Is(err, sandbox.ErrSnapshotUnusable) || !strings.Contains(err.Error(), "rebuilds it") {
			t.Fatalf("warm create from a template with a damaged %s file: %v; want ErrSnapshotUnusable saying it is rebuilt", what, err)
		}
		if n := len(f.mgr.List()); n != before {
			t.Errorf("damaged %s: %d sandboxes after the failed create, want %d", what, n, before)
		}
		if left, _ := filepath.Glob(filepath.Join(f.state, "warm", "*")); len(left) != 0 {
			t.Errorf("damaged %s: the template is still there: %v", what, left)
		}
		f.warm(t) // rebuilt
	}
}

// TestWarmMemoryConcurrent: 8 concurrent warm creates of one shape all
// succeed (one builds the template, the others wait and clone it).
func TestWarmMemoryConcurrent(t *testing.T) {
	f := newMemFixture(t)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	sbs := make([]*sandbox.Sandbox, 8)
	for i := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = f.warmErr(t)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("warm create %d of 8: %v", i, err)
		}
	}
	for _, sb := range sbs {
		if out, _, st := sh(t, sb, "hostname", 60*time.Second); st.Code != 0 || strings.TrimSpace(out) != sb.Domain {
			t.Errorf("clone %s: hostname %q %+v", sb.ID, out, st)
		}
	}
	f.template(t)
}

// TestWarmMemoryCloneLifecycle: a clone's own snapshot restores into a
// sandbox that no longer needs the template (removed first), and a
// stopped clone starts again (a cold boot with private RAM).
func TestWarmMemoryCloneLifecycle(t *testing.T) {
	f := newMemFixture(t)
	a := f.warm(t)
	sh(t, a, "echo kept > /root/kept && sync", 30*time.Second)
	if _, err := f.snaps.Save(context.Background(), a, "c1", nil); err != nil {
		t.Fatalf("snapshot of a clone: %v", err)
	}
	t.Cleanup(func() { f.snaps.Delete(context.Background(), "c1") })
	dir, man := f.template(t)
	for _, tpl := range f.ws.Templates() {
		if err := f.ws.Delete(context.Background(), tpl.Key); err != nil {
			t.Fatal(err)
		}
	}
	// The template's RAM file is gone while clone a runs: a's QEMU keeps
	// its inode mapped (the kernel frees it with the last mapping), so the
	// guest pages a had not touched yet still read as the template's.
	if _, err := os.Stat(filepath.Join(dir, ramName(man))); !os.IsNotExist(err) {
		t.Fatalf("the removed template's RAM file: %v; want it gone", err)
	}
	if out, _, st := sh(t, a, "cat /usr/bin/* /usr/lib/x86_64-linux-gnu/*.so* >/dev/null && echo 3 >/proc/sys/vm/drop_caches && cat /root/kept", 120*time.Second); st.Code != 0 || strings.TrimSpace(out) != "kept" {
		t.Errorf("clone after its template was removed: %q %+v", out, st)
	}
	r, err := f.snaps.Restore(context.Background(), "c1", snapshot.RestoreOptions{Image: f.img})
	if err != nil {
		t.Fatalf("restore of a clone's snapshot after its template was removed: %v", err)
	}
	t.Cleanup(func() { f.mgr.Destroy(context.Background(), r) })
	if out, _, _ := sh(t, r, "cat /root/kept", 30*time.Second); strings.TrimSpace(out) != "kept" {
		t.Errorf("restored clone snapshot: /root/kept = %q", out)
	}
	if mb := r.Record().Spec.MemoryBackend; mb == nil || mb.File != "" || mb.Incoming {
		t.Errorf("restored clone snapshot: memory backend %+v; want private anonymous RAM", mb)
	}
	if err := f.mgr.Stop(context.Background(), a, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Start(context.Background(), a, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatalf("start a stopped clone again: %v", err)
	}
	if out, _, _ := sh(t, a, "cat /root/kept", 30*time.Second); strings.TrimSpace(out) != "kept" {
		t.Errorf("restarted clone: /root/kept = %q", out)
	}
}
