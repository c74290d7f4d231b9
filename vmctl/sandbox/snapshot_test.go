package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/guestagent"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
	"github.com/agentbox/agentbox/vmctl/store"
)

// fakeDriver runs each "domain" as a guest agent process on the domain's
// agent socket, and keeps snapshots as qemu-img's disk-only
// internal snapshots of the domain's overlay: enough for the manager's
// snapshot logic (records, files, errors, cleanup) without a VM. The
// real driver is exercised by tests/e2e/snapshot_test.go.
type fakeDriver struct {
	mu       sync.Mutex
	doms     map[string]*fakeDomain
	watches  map[string]chan sandbox.Stop
	pauses   int
	diskFull bool
	etc      string
}

type fakeDomain struct {
	spec   domain.Spec
	paused bool
	ln     net.Listener
	cancel context.CancelFunc
	proc   *os.Process // the guest agent: stopped (SIGSTOP) while paused, as a guest's vCPUs are
}

func newFakeDriver(t *testing.T) *fakeDriver {
	return &fakeDriver{doms: map[string]*fakeDomain{}, watches: map[string]chan sandbox.Stop{},
		etc: t.TempDir()}
}

var _ sandbox.Snapshotter = (*fakeDriver)(nil)

func (f *fakeDriver) start(spec domain.Spec, paused bool) error {
	ln, err := net.Listen("unix", spec.AgentSocket)
	if err != nil {
		return err
	}
	lf, err := ln.(*net.UnixListener).File()
	if err != nil {
		ln.Close()
		return err
	}
	defer lf.Close()
	// The guest agent runs in a child process (this test binary, see
	// TestMain): it reaps every child of its process, which would break
	// the qemu-img runs of the manager in this one.
	dir := filepath.Join(f.etc, spec.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fakeAgentEnv+"="+dir)
	cmd.ExtraFiles = []*os.File{lf}
	if err := cmd.Start(); err != nil {
		ln.Close()
		return err
	}
	go cmd.Wait()
	if paused {
		cmd.Process.Signal(syscall.SIGSTOP)
	}
	f.mu.Lock()
	f.doms[spec.Name] = &fakeDomain{spec: spec, paused: paused, ln: ln, cancel: func() { cmd.Process.Kill() }, proc: cmd.Process}
	f.mu.Unlock()
	return nil
}

// fakeAgentEnv names the directory where a fake guest agent child keeps
// what it was told (hostname, clock) and its /etc.
const fakeAgentEnv = "AGENTBOX_FAKE_AGENT_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeAgentEnv); dir != "" {
		ln, err := net.FileListener(os.NewFile(3, "agent listener"))
		if err != nil {
			os.Exit(1)
		}
		opts := guestagent.Options{
			EtcDir: dir,
			SetClock: func(t time.Time) error {
				return os.WriteFile(filepath.Join(dir, "clock.set"), []byte(t.Format(time.RFC3339Nano)), 0o600)
			},
			SetHostname: func(h string) error { return os.WriteFile(filepath.Join(dir, "hostname.set"), []byte(h), 0o600) },
			// One line per reseed (not the host's kernel: the test is not a guest).
			Reseed: func(entropy []byte) (bool, error) {
				f, err := os.OpenFile(filepath.Join(dir, "reseed.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
				if err != nil {
					return false, err
				}
				defer f.Close()
				_, err = fmt.Fprintf(f, "%d\n", len(entropy))
				return true, err
			},
			ConfigureNetwork: func(req agentproto.NetworkRequest) error {
				data, _ := json.Marshal(req)
				return os.WriteFile(filepath.Join(dir, "network.set"), data, 0o600)
			},
		}
		for {
			conn, err := ln.Accept()
			if err != nil {
				os.Exit(0)
			}
			guestagent.Serve(context.Background(), conn, opts)
		}
	}
	os.Exit(m.Run())
}

// reseeds returns how often the fake guest agent of domain name was
// reseeded.
func (f *fakeDriver) reseeds(name string) int {
	data, _ := os.ReadFile(filepath.Join(f.etc, name, "reseed.log"))
	return strings.Count(string(data), "\n")
}

// told returns what the fake guest agent of domain name was told: its
// hostname and clock.
func (f *fakeDriver) told(name string) (string, time.Time) {
	h, _ := os.ReadFile(filepath.Join(f.etc, name, "hostname.set"))
	c, _ := os.ReadFile(filepath.Join(f.etc, name, "clock.set"))
	t, _ := time.Parse(time.RFC3339Nano, string(c))
	return string(h), t
}

func (f *fakeDriver) StartDomain(ctx context.Context, spec domain.Spec) error {
	return f.start(spec, false)
}

func (f *fakeDriver) StartDomainPaused(ctx context.Context, spec domain.Spec) error {
	return f.start(spec, true)
}

func (f *fakeDriver) DestroyDomain(ctx context.Context, name string) error {
	f.mu.Lock()
	d, ok := f.doms[name]
	delete(f.doms, name)
	w := f.watches[name]
	delete(f.watches, name)
	f.mu.Unlock()
	if ok {
		d.cancel()
		d.ln.Close()
	}
	if w != nil {
		w <- sandbox.Stop{Reason: "destroyed"}
	}
	return nil
}

func (f *fakeDriver) WatchStop(ctx context.Context, name string) (<-chan sandbox.Stop, error) {
	ch := make(chan sandbox.Stop, 1)
	f.mu.Lock()
	f.watches[name] = ch
	f.mu.Unlock()
	return ch, nil
}

func (f *fakeDriver) ListDomains(ctx context.Context) ([]sandbox.DomainStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.DomainStatus
	for n, d := range f.doms {
		out = append(out, sandbox.DomainStatus{Name: n, SandboxID: d.spec.SandboxID, Owner: d.spec.Owner, Running: true})
	}
	return out, nil
}

func (f *fakeDriver) dom(name string) (*fakeDomain, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.doms[name]
	if !ok {
		return nil, fmt.Errorf("domain %s: %w", name, sandbox.ErrNotRunning)
	}
	return d, nil
}

func (f *fakeDriver) PauseDomain(ctx context.Context, name string) error {
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	f.mu.Lock()
	d.paused = true
	f.pauses++
	f.mu.Unlock()
	return d.proc.Signal(syscall.SIGSTOP)
}

func (f *fakeDriver) ResumeDomain(ctx context.Context, name string) error {
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	f.mu.Lock()
	d.paused = false
	f.mu.Unlock()
	return d.proc.Signal(syscall.SIGCONT)
}

func (f *fakeDriver) SaveSnapshot(ctx context.Context, name, tag string) error {
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	if f.diskFull {
		return errors.New("snapshot-save job failed: Error while writing VM state: No space left on device")
	}
	if has(t0, d.spec.Disk, tag) {
		return sandbox.ErrSnapshotExists
	}
	return qemuImg("snapshot", "-c", tag, d.spec.Disk)
}

func (f *fakeDriver) LoadSnapshot(ctx context.Context, name, tag string) error {
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	if !has(t0, d.spec.Disk, tag) {
		return sandbox.ErrNoSnapshot
	}
	return nil
}

func (f *fakeDriver) DeleteSnapshot(ctx context.Context, name, tag string) error {
	d, err := f.dom(name)
	if err != nil {
		return err
	}
	if !has(t0, d.spec.Disk, tag) {
		return sandbox.ErrNoSnapshot
	}
	return qemuImg("snapshot", "-d", tag, d.spec.Disk)
}

var t0 = context.Background()

func has(ctx context.Context, file, tag string) bool {
	list, err := overlay.Snapshots(ctx, file)
	if err != nil {
		return false
	}
	for _, s := range list {
		if s.Tag == tag {
			return true
		}
	}
	return false
}

func qemuImg(args ...string) error {
	if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("qemu-img %v: %v: %s", args, err, out)
	}
	return nil
}

// bareDriver hides the fake's Snapshotter methods.
type bareDriver struct{ sandbox.Driver }

// fakeImage is an image whose base disk is a small empty qcow2.
func fakeImage(t *testing.T, digest string) *image.Image {
	dir := t.TempDir()
	disk := filepath.Join(dir, "rootfs.qcow2")
	if _, err := exec.LookPath("qemu-img"); err != nil {
		testenv.SkipOrFail(t, "qemu-img is not installed")
	}
	if err := qemuImg("create", "-q", "-f", "qcow2", disk, "16M"); err != nil {
		t.Fatal(err)
	}
	img := &image.Image{Dir: dir, Kernel: filepath.Join(dir, "vmlinuz"), Disk: disk, Digest: digest}
	img.Manifest.Name, img.Manifest.AgentPort = "fake", "org.agentbox.agent.0"
	img.Manifest.Cmdline = "console=ttyS0"
	img.Manifest.Resources.VCPUs, img.Manifest.Resources.MemoryMiB = 1, 128
	return img
}

type fakeFixture struct {
	drv     *fakeDriver
	mgr     *sandbox.Manager
	snaps   *snapshot.Service
	ws      *warm.Service
	img     *image.Image
	state   string
	runtime string
	st      *store.Store
}

// newManager makes a manager of cfg (with the resources enforcer) and its
// snapshot and warm services, as the daemon does.
func newManager(cfg sandbox.Config) (*sandbox.Manager, *snapshot.Service, *warm.Service, error) {
	cfg.Limits = resources.New(cfg.Driver, cfg.Logger)
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	snaps := snapshot.New(m)
	return m, snaps, warm.New(m, snaps), nil
}

func newFakeFixture(t *testing.T, drv sandbox.Driver, fd *fakeDriver) *fakeFixture {
	f := &fakeFixture{drv: fd, img: fakeImage(t, "d1"), state: t.TempDir(), runtime: testenv.ShortTempDir(t)}
	var err error
	if f.st, err = store.Open(filepath.Join(f.state, "state.db"), store.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	f.mgr, f.snaps, f.ws, err = newManager(sandbox.Config{Driver: drv, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeFixture) create(t *testing.T, name string) *sandbox.Sandbox {
	t.Helper()
	sb, err := f.mgr.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: name, BootTimeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return sb
}

func TestSnapshotManagerFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	src := f.create(t, "src")
	if _, err := f.snaps.Save(t0, src, "", nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("save without a name: %v", err)
	}
	snap, err := f.snaps.Save(t0, src, "a", []byte(`{"k":1}`))
	if err != nil {
		t.Fatal(err)
	}
	if snap.SandboxID != src.ID || snap.File != src.Overlay || snap.Tag != "s"+snap.ID || snap.MemoryMiB != 128 || snap.Machine != domain.DefaultMachine || string(snap.Extra) != `{"k":1}` {
		t.Errorf("record %+v", snap)
	}
	if _, err := f.snaps.Save(t0, src, "a", nil); !errors.Is(err, sandbox.ErrSnapshotNameTaken) {
		t.Errorf("duplicate name: %v", err)
	}
	fd.diskFull = true
	if _, err := f.snaps.Save(t0, src, "full", nil); !errors.Is(err, sandbox.ErrNoSpace) || !strings.Contains(err.Error(), "keeps running") {
		t.Errorf("disk full: %v", err)
	}
	fd.diskFull = false
	if list, _ := f.snaps.List(""); len(list) != 1 {
		t.Errorf("after a failed save: %+v", list)
	}
	if src.State() != sandbox.StateRunning {
		t.Errorf("source is %s after a failed save", src.State())
	}

	// Restore: a new sandbox, its own name, paths, hostname, the host's time.
	before := time.Now()
	fork, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: f.img, Name: "fork", Labels: map[string]string{"x": "y"}, Extra: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if fork.ID == src.ID || fork.Name != "fork" || fork.Overlay == src.Overlay || fork.State() != sandbox.StateRunning || fork.Labels["x"] != "y" {
		t.Errorf("fork %+v", fork.Record())
	}
	host, clock := fd.told(fork.Domain)
	fd.mu.Lock()
	pauses := fd.pauses
	fd.mu.Unlock()
	if host != fork.Domain || clock.Before(before) || pauses != 1 {
		t.Errorf("fork: hostname %q, clock %v (restore began %v), source pauses %d; want its domain name, the host's time, 1", host, clock, before, pauses)
	}
	if d, _ := fd.dom(src.Domain); d.paused {
		t.Error("the source stayed paused after the copy")
	}
	if !has(t0, fork.Overlay, snap.Tag) {
		t.Error("the fork's overlay is not a copy of the snapshot's file")
	}
	if _, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: f.img, Name: "fork"}); !errors.Is(err, sandbox.ErrNameTaken) {
		t.Errorf("restore onto a taken name: %v", err)
	}
	other := *f.img
	other.Digest = "d2"
	if _, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: &other}); !errors.Is(err, sandbox.ErrSnapshotUnusable) {
		t.Errorf("restore onto another image: %v", err)
	}
	if _, err := f.snaps.Restore(t0, "nope", snapshot.RestoreOptions{Image: f.img}); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("restore of a missing snapshot: %v", err)
	}
	if n := len(f.mgr.List()); n != 2 {
		t.Errorf("%d sandboxes after refused restores, want 2", n)
	}

	// A stopped sandbox cannot be saved.
	if err := f.mgr.Stop(t0, fork, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.snaps.Save(t0, fork, "b", nil); !errors.Is(err, sandbox.ErrNotRunning) {
		t.Errorf("save of a stopped sandbox: %v", err)
	}
	if err := f.mgr.Remove(t0, fork, false); err != nil {
		t.Fatal(err)
	}

	// The snapshot outlives its sandbox, in STATE/snapshots.
	if _, err := f.snaps.Save(t0, src, "b", nil); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Remove(t0, src, true); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(f.state, "snapshots", src.ID+".qcow2")
	for _, name := range []string{"a", "b"} {
		r, err := f.snaps.Get(name)
		if err != nil || r.File != kept {
			t.Errorf("snapshot %s after its sandbox's removal: %+v %v; want file %s", name, r, err, kept)
		}
	}
	if got, _ := f.st.Snapshots(); len(got) != 2 || got[0].File != kept || got[1].File != kept {
		t.Errorf("stored records not repointed: %+v", got)
	}
	fork2, err := f.snaps.Restore(t0, "b", snapshot.RestoreOptions{Image: f.img})
	if err != nil {
		t.Fatalf("restore after the source's removal: %v", err)
	}
	if err := f.snaps.Delete(t0, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept); err != nil || has(t0, kept, snap.Tag) {
		t.Errorf("after deleting one of two snapshots the file must stay without its tag: %v", err)
	}
	if err := f.snaps.Delete(t0, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("the kept file outlived its last snapshot: %v", err)
	}
	if err := f.snaps.Delete(t0, "b"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("second delete: %v", err)
	}
	if err := f.mgr.Remove(t0, fork2, true); err != nil {
		t.Fatal(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
	if len(fd.doms) != 0 {
		t.Errorf("domains left: %v", fd.doms)
	}
}

// TestSnapshotReconcileFake: records survive a new manager on the same
// store; a file in STATE/snapshots that no snapshot uses is removed, one
// that a snapshot uses is kept.
func TestSnapshotReconcileFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	src := f.create(t, "")
	if _, err := f.snaps.Save(t0, src, "keep", nil); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Remove(t0, src, true); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(f.state, "snapshots", "0123456789ab.qcow2")
	if err := os.WriteFile(orphan, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mgr, snaps, _, err := newManager(sandbox.Config{Driver: fd, StateDir: f.state, RuntimeDir: f.runtime, Store: f.st, Owner: f.st.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.Reconcile(t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cleaned) != 1 || rep.Cleaned[0] != "snapshot file "+orphan {
		t.Errorf("cleaned %v; want only the orphan file", rep.Cleaned)
	}
	r, err := snaps.Get("keep")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.File); err != nil {
		t.Errorf("reconcile removed a snapshot's file: %v", err)
	}
	if err := snaps.Delete(t0, "keep"); err != nil {
		t.Fatal(err)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}

func TestSnapshotUnsupportedDriver(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, bareDriver{fd}, fd)
	sb := f.create(t, "")
	defer f.mgr.Destroy(t0, sb)
	if _, err := f.snaps.Save(t0, sb, "a", nil); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("save with a driver without snapshots: %v", err)
	}
	if _, err := f.snaps.Restore(t0, "a", snapshot.RestoreOptions{Image: f.img}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("restore with a driver without snapshots: %v", err)
	}
}

// TestWarmFake: concurrent first warm creates build one template; with a
// pool of 1 the next warm create takes the pool's member; Drain
// leaves nothing.
func TestWarmFake(t *testing.T) {
	fd := newFakeDriver(t)
	f := newFakeFixture(t, fd, fd)
	f.ws.SetPool(1)
	var wg sync.WaitGroup
	sbs := make([]*sandbox.Sandbox, 2)
	errs := make([]error, 2)
	for i := range sbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sbs[i], errs[i] = f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: fmt.Sprintf("w%d", i)})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	manifests, _ := filepath.Glob(filepath.Join(f.state, "warm", "*", "manifest.json"))
	if len(manifests) != 1 {
		t.Errorf("templates: %v; want one", manifests)
	}
	if n := len(f.mgr.List()); n != 2 {
		t.Errorf("%d sandboxes; want the two warm ones (the template's is gone)", n)
	}
	// The pool fills in the background: 2 warm sandboxes + 1 member.
	deadline := time.Now().Add(30 * time.Second)
	for {
		doms, _ := fd.ListDomains(t0)
		if len(doms) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill: domains %v", doms)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w3, err := f.ws.Create(t0, sandbox.Options{Image: f.img, Accel: tcg, Name: "w3"})
	if err != nil {
		t.Fatal(err)
	}
	if host, _ := fd.told(w3.Domain); host != w3.Domain || w3.State() != sandbox.StateRunning || w3.Name != "w3" {
		t.Errorf("pooled sandbox %+v: hostname %q", w3.Record(), host)
	}
	// The image changed (another digest in the same directory): a new
	// template replaces the old one.
	changed := *f.img
	changed.Digest = "d2"
	w4, err := f.ws.Create(t0, sandbox.Options{Image: &changed, Accel: tcg})
	if err != nil {
		t.Fatal(err)
	}
	if now, _ := filepath.Glob(filepath.Join(f.state, "warm", "*", "manifest.json")); len(now) != 1 || now[0] == manifests[0] {
		t.Errorf("templates after the image changed: %v (before: %v); want only a new one", now, manifests)
	}
	for _, sb := range append(sbs, w3, w4) {
		if err := f.mgr.Destroy(t0, sb); err != nil {
			t.Error(err)
		}
	}
	if err := f.ws.Drain(t0); err != nil {
		t.Fatal(err)
	}
	if doms, _ := fd.ListDomains(t0); len(doms) != 0 {
		t.Errorf("domains after the drain: %v", doms)
	}
	testenv.AssertNoLeaks(t, f.state, f.runtime)
}
