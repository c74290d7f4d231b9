package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
)

// warmKeys returns the keys of the manager's templates, most recently
// used first.
func warmKeys(w *warm.Service) []string {
	var keys []string
	for _, t := range w.Templates() {
		keys = append(keys, t.Key)
	}
	return keys
}

// TestWarmTemplatesCapFake: templates are listed most recently used
// first with their shape; building one beyond the cap removes the least
// recently used; DeleteWarmTemplate removes one (404 for an unknown key).
func TestWarmTemplatesCapFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	f.ws.SetTemplates(2)
	warm := func(mem int) string {
		t.Helper()
		sb, err := f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, MemoryMiB: mem})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.mgr.Destroy(t0, sb); err != nil {
			t.Fatal(err)
		}
		return warmKeys(f.ws)[0]
	}
	kA := warm(320)
	kB := warm(256)
	if got := warmKeys(f.ws); len(got) != 2 || got[0] != kB || got[1] != kA {
		t.Fatalf("templates %v; want [%s %s]", got, kB, kA)
	}
	tpl := f.ws.Templates()[0]
	if tpl.MemoryMiB != 256 || tpl.VCPUs != 1 || tpl.ImageName != "fake" || tpl.ImageDir != f.img.Dir || tpl.ImageDigest != "d1" ||
		tpl.Network || tpl.SizeBytes <= 0 || tpl.Pooled != 0 || tpl.LastUsed.IsZero() || tpl.CreatedAt.IsZero() {
		t.Errorf("template %+v", tpl)
	}
	if again := warm(320); again != kA { // used again: now the most recent
		t.Fatalf("a second warm create of one shape made template %s, want %s", again, kA)
	}
	kC := warm(384) // a third shape: the least recently used (kB) goes
	if got := warmKeys(f.ws); len(got) != 2 || got[0] != kC || got[1] != kA {
		t.Fatalf("templates after the cap: %v; want [%s %s] (%s evicted)", got, kC, kA, kB)
	}
	if _, err := os.Stat(filepath.Join(f.state, "warm", kB)); !os.IsNotExist(err) {
		t.Errorf("evicted template's directory: %v", err)
	}
	if err := f.ws.Delete(t0, kC); err != nil {
		t.Fatal(err)
	}
	if got := warmKeys(f.ws); len(got) != 1 || got[0] != kA {
		t.Errorf("templates after rm: %v", got)
	}
	for _, k := range []string{kC, "nope", "../warm"} {
		if err := f.ws.Delete(t0, k); !errors.Is(err, sandbox.ErrNoWarmTemplate) {
			t.Errorf("rm %q: %v; want ErrNoWarmTemplate", k, err)
		}
	}
	if err := f.ws.Delete(t0, kA); err != nil {
		t.Fatal(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}

// TestWarmPoolRefillOnStartFake: a new manager with a pool refills the
// pools of existing templates whose image still loads, without a warm
// create; the first warm create then takes the pooled sandbox, and
// DeleteWarmTemplate destroys pooled members with the template.
func TestWarmPoolRefillOnStartFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	gone := fakeImage(t, "d9")
	for _, img := range []*image.Image{f.img, gone} { // gone is the most recently used
		sb, err := f.ws.Create(t0, sandbox.Options{Image: img, Accel: tcg})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.mgr.Destroy(t0, sb); err != nil {
			t.Fatal(err)
		}
	}
	keys := warmKeys(f.ws)
	if len(keys) != 2 {
		t.Fatalf("templates %v", keys)
	}
	kGone, kLive := keys[0], keys[1]

	mgr, _, ws, err := newManager(sandbox.Config{Driver: fd, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mgr.Reconcile(t0); err != nil {
		t.Fatal(err)
	}
	ws.SetPool(1)
	ws.Refill(func(ctx context.Context, dir string) (*image.Image, error) {
		if dir == f.img.Dir {
			return f.img, nil
		}
		return nil, fmt.Errorf("image %s: no such directory", dir)
	})
	pooled := func() map[string]int {
		p := map[string]int{}
		for _, t := range ws.Templates() {
			p[t.Key] = t.Pooled
		}
		return p
	}
	for deadline := time.Now().Add(30 * time.Second); pooled()[kLive] != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool was not refilled on start: %v", pooled())
		}
	}
	if p := pooled(); p[kGone] != 0 {
		t.Errorf("the template of a gone image was pooled: %v", p)
	}
	if doms, _ := fd.ListDomains(t0); len(doms) != 1 {
		t.Errorf("domains %v; want the one pool member", doms)
	}
	if n := len(mgr.List()); n != 0 {
		t.Errorf("%d sandboxes listed; a pool member is not one", n)
	}
	ws.SetPool(0) // no refill after the take: the test ends with no member
	sb, err := ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if p := pooled(); p[kLive] != 0 {
		t.Errorf("after a warm create the pool holds %v; want the member taken", p)
	}
	if doms, _ := fd.ListDomains(t0); len(doms) != 1 || sb.State() != sandbox.StateRunning {
		t.Errorf("domains %v, sandbox %s; want only the taken member, running", doms, sb.State())
	}
	if err := mgr.Destroy(t0, sb); err != nil {
		t.Fatal(err)
	}
	// A template's pool goes with it.
	ws.SetPool(1)
	ws.Refill(func(ctx context.Context, dir string) (*image.Image, error) { return f.img, nil })
	for deadline := time.Now().Add(30 * time.Second); pooled()[kLive] != 1; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool was not refilled: %v", pooled())
		}
	}
	for _, k := range keys {
		if err := ws.Delete(t0, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := ws.Drain(t0); err != nil {
		t.Fatal(err)
	}
	if doms, _ := fd.ListDomains(t0); len(doms) != 0 {
		t.Errorf("domains after rm of the templates: %v", doms)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}

// TestWarmUnusableTemplateFake: a template whose snapshot no longer
// loads is removed when a warm create fails on it (the error says so),
// and the next warm create of its shape builds it again.
func TestWarmUnusableTemplateFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	sb, err := f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Destroy(t0, sb); err != nil {
		t.Fatal(err)
	}
	key := warmKeys(f.ws)[0]
	if err := qemuImg("snapshot", "-d", "ready", filepath.Join(f.state, "warm", key, "overlay.qcow2")); err != nil {
		t.Fatal(err)
	}
	_, err = f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg})
	if !errors.Is(err, sandbox.ErrSnapshotUnusable) || !strings.Contains(err.Error(), "the warm template was removed") {
		t.Fatalf("warm create from a broken template: %v; want ErrSnapshotUnusable saying the template was removed", err)
	}
	if _, err := os.Stat(filepath.Join(f.state, "warm", key)); !os.IsNotExist(err) {
		t.Errorf("broken template's directory: %v; want it removed", err)
	}
	if got := warmKeys(f.ws); len(got) != 0 {
		t.Errorf("templates after the failure: %v; want none", got)
	}
	if n := len(f.mgr.List()); n != 0 {
		t.Errorf("%d sandboxes after the failed warm create, want none", n)
	}
	sb, err = f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg})
	if err != nil {
		t.Fatalf("warm create after the removal: %v; want a rebuilt template", err)
	}
	if err := f.mgr.Destroy(t0, sb); err != nil {
		t.Fatal(err)
	}
	if err := f.ws.Delete(t0, key); err != nil {
		t.Fatal(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}
