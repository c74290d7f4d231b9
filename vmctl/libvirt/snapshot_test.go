package libvirt

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/digitalocean/go-qemu/qemu"
	goqmp "github.com/digitalocean/go-qemu/qmp"
	"github.com/digitalocean/go-qemu/qmp/raw"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/qmp"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// bootTimeout bounds a TCG boot up to the agent's handshake on a busy
// 2-core host.
const bootTimeout = 4 * time.Minute

// testGuest is a domain of the test image with its own overlay, agent
// socket and console log.
type testGuest struct {
	t       *testing.T
	name    string
	spec    domain.Spec
	overlay string
	agent   *agent.Client
}

// guestSpec describes a domain of the test image named name with memMiB of
// RAM over disk; sockets and console go to a fresh short directory.
func guestSpec(t *testing.T, name string, memMiB uint64, disk string) domain.Spec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := image.Load(ctx, testenv.Image(t), image.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	run := testenv.ShortTempDir(t)
	return domain.Spec{
		Name:        name,
		SandboxID:   "snap-" + name,
		Image:       img.Digest,
		Type:        domain.TypeQEMU,
		VCPUs:       1,
		MemoryMiB:   memMiB,
		Kernel:      img.Kernel,
		Initrd:      img.Initrd,
		Cmdline:     img.Manifest.Cmdline + " agentbox.port=" + img.Manifest.AgentPort + " agentbox.hostname=" + name,
		Disk:        disk,
		AgentSocket: filepath.Join(run, "agent.sock"),
		AgentPort:   img.Manifest.AgentPort,
		ConsoleLog:  filepath.Join(run, "console.log"),
	}
}

// newOverlay creates an overlay of the test image in dir.
func newOverlay(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := image.Load(ctx, testenv.Image(t), image.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "disk.qcow2")
	if err := overlay.Create(ctx, img.Disk, path, overlay.Options{}); err != nil {
		t.Fatal(err)
	}
	return path
}

// startGuest starts spec (paused or not) and destroys it at cleanup. A
// running guest is booted until its agent answers.
func startGuest(t *testing.T, d *Driver, spec domain.Spec, paused bool) *testGuest {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := d.StartDomain
	if paused {
		start = d.StartDomainPaused
	}
	if err := start(ctx, spec); err != nil {
		t.Fatalf("start %s: %v", spec.Name, err)
	}
	g := &testGuest{t: t, name: spec.Name, spec: spec, overlay: spec.Disk}
	t.Cleanup(func() {
		if g.agent != nil {
			g.agent.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.DestroyDomain(ctx, spec.Name); err != nil {
			t.Errorf("destroy %s: %v", spec.Name, err)
		}
	})
	if !paused {
		g.connect()
	}
	return g
}

// connect dials the guest's agent and waits for its handshake, after
// closing an earlier session (QEMU's chardev socket serves one client).
func (g *testGuest) connect() {
	g.t.Helper()
	if g.agent != nil {
		g.agent.Close()
		g.agent = nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), bootTimeout)
	defer cancel()
	var dl net.Dialer
	conn, err := dl.DialContext(ctx, "unix", g.spec.AgentSocket)
	if err != nil {
		g.t.Fatalf("agent socket of %s: %v", g.name, err)
	}
	c, err := agent.Dial(ctx, conn, agent.Options{})
	if err != nil {
		b, _ := os.ReadFile(g.spec.ConsoleLog)
		g.t.Fatalf("agent of %s: %v\nconsole:\n%s", g.name, err, b)
	}
	g.agent = c
}

// sh runs a shell command in the guest and returns its stdout.
func (g *testGuest) sh(script string) string {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	st, err := g.agent.Exec(ctx, agentproto.ExecRequest{Argv: []string{"sh", "-c", script}}, nil, &out, &errb)
	if err != nil || st.Code != 0 {
		g.t.Fatalf("%s: sh -c %q: %+v %v: %s", g.name, script, st, err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// counterScript starts a detached python process that counts in memory
// and publishes the count in /dev (devtmpfs: RAM, not the disk).
const counterScript = `setsid python3 -c '
import os, time
open("/dev/abpid", "w").write(str(os.getpid()))
i = 0
while True:
    i += 1
    open("/dev/abcount.tmp", "w").write(str(i))
    os.rename("/dev/abcount.tmp", "/dev/abcount")
    time.sleep(0.05)
' </dev/null >/dev/null 2>&1 &`

// count reads the guest counter's pid and value.
func (g *testGuest) count() (pid string, n int) {
	g.t.Helper()
	out := g.sh(`cat /dev/abpid; echo; cat /dev/abcount`)
	pid, v, _ := strings.Cut(out, "\n")
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		g.t.Fatalf("counter of %s: %q", g.name, out)
	}
	return pid, n
}

// countPast waits until the guest counter exceeds n (it counts 20 times a
// second while the guest runs).
func (g *testGuest) countPast(n int) int {
	g.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, v := g.count()
		if v > n {
			return v
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("counter of %s stuck at %d", g.name, v)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func qemuStatus(t *testing.T, c *Conn, name string) string {
	t.Helper()
	m := qmp.New(c, name, qmp.Options{})
	st, err := m.QueryStatus(context.Background())
	if err != nil {
		t.Fatalf("query-status of %s: %v", name, err)
	}
	return st.Status
}

func snapshotTags(t *testing.T, path string) map[string]overlay.Snapshot {
	t.Helper()
	list, err := overlay.Snapshots(context.Background(), path)
	if err != nil {
		t.Fatalf("snapshots of %s: %v", path, err)
	}
	out := make(map[string]overlay.Snapshot)
	for _, s := range list {
		out[s.Tag] = s
	}
	return out
}

// TestSnapshotRestore saves a running guest (which keeps running), copies
// its overlay, starts a second domain of the same shape paused from the
// copy, loads the snapshot and resumes it: the in-memory counter process
// continues from where it was, the disk is at the saved instant, and the
// error cases (duplicate tag, missing tag on load and delete) hold.
func TestSnapshotRestore(t *testing.T) {
	c := connectSystem(t)
	d := NewDriver(c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	g1 := startGuest(t, d, guestSpec(t, uniqueName(), 256, newOverlay(t, t.TempDir())), false)
	g1.sh(counterScript + ` for i in $(seq 100); do [ -s /dev/abcount ] && break; sleep 0.2; done; echo before > /root/before; sync`)
	pid0, v0 := g1.count()

	start := time.Now()
	if err := d.SaveSnapshot(ctx, g1.name, "snap1"); err != nil {
		t.Fatalf("SaveSnapshot: %v", err)
	}
	saveTook := time.Since(start)

	// The original keeps running: its agent answers and its counter counts.
	if st := qemuStatus(t, c, g1.name); st != "running" {
		t.Errorf("QEMU status after save = %q, want running", st)
	}
	g1.countPast(g1.countPast(v0))
	g1.sh(`echo after > /root/after; sync`)
	snaps := snapshotTags(t, g1.overlay)
	if s, ok := snaps["snap1"]; !ok || s.VMStateSize == 0 {
		t.Fatalf("overlay snapshots = %+v, want snap1 with a vmstate", snaps)
	}

	if err := d.SaveSnapshot(ctx, g1.name, "snap1"); !errors.Is(err, sandbox.ErrSnapshotExists) {
		t.Errorf("second SaveSnapshot of snap1 = %v, want ErrSnapshotExists", err)
	}
	if err := d.DeleteSnapshot(ctx, g1.name, "nope"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("DeleteSnapshot of a missing tag = %v, want ErrNoSnapshot", err)
	}
	if err := d.SaveSnapshot(ctx, g1.name, "1bad"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("SaveSnapshot with tag 1bad = %v, want ErrInvalid", err)
	}
	if n := len(snapshotTags(t, g1.overlay)); n != 1 {
		t.Errorf("overlay holds %d snapshots after the failed calls, want 1", n)
	}

	// Copy the overlay while the original is paused (QMP stop flushes
	// QEMU's qcow2 caches), then let it run on.
	if err := d.PauseDomain(ctx, g1.name); err != nil {
		t.Fatalf("PauseDomain: %v", err)
	}
	if st, err := c.DomainState(ctx, g1.name); err != nil || st != StatePaused {
		t.Errorf("libvirt state after PauseDomain = %s, %v", st, err)
	}
	copyPath := filepath.Join(t.TempDir(), "copy.qcow2")
	start = time.Now()
	if err := overlay.Copy(ctx, g1.overlay, copyPath); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	copyTook := time.Since(start)
	if err := d.ResumeDomain(ctx, g1.name); err != nil {
		t.Fatalf("ResumeDomain: %v", err)
	}
	if err := d.ResumeDomain(ctx, g1.name); err != nil {
		t.Errorf("ResumeDomain of a running domain: %v", err)
	}

	// Another shape (512 MiB instead of 256): QEMU's load fails (RAM
	// block size mismatch) and leaves the domain paused for the caller
	// to destroy.
	copy2 := filepath.Join(t.TempDir(), "copy2.qcow2")
	if err := overlay.Copy(ctx, copyPath, copy2); err != nil {
		t.Fatal(err)
	}
	g3 := startGuest(t, d, guestSpec(t, uniqueName(), 512, copy2), true)
	err := d.LoadSnapshot(ctx, g3.name, "snap1")
	var je *qmp.JobError
	if !errors.As(err, &je) || errors.Is(err, sandbox.ErrNoSnapshot) || !strings.Contains(err.Error(), "left paused") {
		t.Errorf("LoadSnapshot into another shape = %v, want the job's error", err)
	}
	t.Logf("LoadSnapshot into another shape: %v", err)
	if st := qemuStatus(t, c, g3.name); st == "running" {
		t.Errorf("QEMU status after a failed load = %q, want paused", st)
	}
	if err := d.DestroyDomain(ctx, g3.name); err != nil {
		t.Errorf("destroy after a failed load: %v", err)
	}

	// The fork: same shape, its own name, sockets and console.
	spec2 := guestSpec(t, uniqueName(), 256, copyPath)
	g2 := startGuest(t, d, spec2, true)
	if st := qemuStatus(t, c, g2.name); st != "prelaunch" {
		t.Errorf("QEMU status of a domain started paused = %q, want prelaunch", st)
	}
	if err := d.LoadSnapshot(ctx, g2.name, "nope"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("LoadSnapshot of a missing tag = %v, want ErrNoSnapshot", err)
	}
	if st, err := c.DomainState(ctx, g2.name); err != nil || st != StatePaused {
		t.Errorf("libvirt state after a refused load = %s, %v; want paused", st, err)
	}
	start = time.Now()
	if err := d.LoadSnapshot(ctx, g2.name, "snap1"); err != nil {
		t.Fatalf("LoadSnapshot: %v", err)
	}
	loadTook := time.Since(start)
	if st := qemuStatus(t, c, g2.name); st == "running" {
		t.Errorf("QEMU status after load = %q, want paused", st)
	}
	if err := d.ResumeDomain(ctx, g2.name); err != nil {
		t.Fatalf("ResumeDomain after load: %v", err)
	}
	resumed := time.Now()
	if st := qemuStatus(t, c, g2.name); st != "running" {
		t.Errorf("QEMU status after resume = %q", st)
	}
	g2.connect()
	t.Logf("agent of the restored guest answered %s after resume", time.Since(resumed))

	pid2, v2 := g2.count()
	if pid2 != pid0 || v2 < v0 {
		t.Errorf("restored counter: pid %s value %d; saved from pid %s at ≥ %d", pid2, v2, pid0, v0)
	}
	g2.countPast(v2)
	if out := g2.sh(`cat /root/before; [ -e /root/after ] && echo after-exists || echo no-after`); out != "before\nno-after" {
		t.Errorf("restored disk: %q, want the file written before the save only", out)
	}
	// The original is independent of the fork.
	if _, v := g1.count(); v < v2 {
		g1.countPast(v)
	}
	if out := g1.sh(`cat /root/after`); out != "after" {
		t.Errorf("original's disk: %q", out)
	}

	if err := d.DeleteSnapshot(ctx, g1.name, "snap1"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if snaps := snapshotTags(t, g1.overlay); len(snaps) != 0 {
		t.Errorf("snapshots after delete: %+v", snaps)
	}
	if err := d.DeleteSnapshot(ctx, g1.name, "snap1"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("second DeleteSnapshot = %v, want ErrNoSnapshot", err)
	}
	st, _ := os.Stat(copyPath)
	t.Logf("FIGURES 256MiB: save %s, load %s, vmstate %d bytes, overlay copy %s (%d bytes)",
		saveTook.Round(time.Millisecond), loadTook.Round(time.Millisecond), snaps["snap1"].VMStateSize, copyTook.Round(time.Millisecond), st.Size())
}

// TestSnapshotLarge saves a 1 GiB guest and loads the snapshot back into
// the same domain (LoadSnapshot pauses a running domain first).
func TestSnapshotLarge(t *testing.T) {
	c := connectSystem(t)
	d := NewDriver(c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	g := startGuest(t, d, guestSpec(t, uniqueName(), 1024, newOverlay(t, t.TempDir())), false)
	g.sh(counterScript + ` for i in $(seq 100); do [ -s /dev/abcount ] && break; sleep 0.2; done`)
	pid0, v0 := g.count()
	start := time.Now()
	if err := d.SaveSnapshot(ctx, g.name, "big"); err != nil {
		t.Fatalf("SaveSnapshot: %v", err)
	}
	saveTook := time.Since(start)
	g.countPast(v0)
	size := snapshotTags(t, g.overlay)["big"].VMStateSize
	if size == 0 {
		t.Fatal("no vmstate saved")
	}
	start = time.Now()
	if err := d.LoadSnapshot(ctx, g.name, "big"); err != nil {
		t.Fatalf("LoadSnapshot: %v", err)
	}
	loadTook := time.Since(start)
	if err := d.ResumeDomain(ctx, g.name); err != nil {
		t.Fatal(err)
	}
	g.connect()
	if pid, v := g.count(); pid != pid0 || v < v0 {
		t.Errorf("counter after load: pid %s value %d, saved pid %s ≥ %d", pid, v, pid0, v0)
	}
	t.Logf("FIGURES 1GiB: save %s, load %s, vmstate %d bytes", saveTook.Round(time.Millisecond), loadTook.Round(time.Millisecond), size)
}

// TestSnapshotENOSPC puts the overlay on a tmpfs too small for the
// vmstate: the save fails with QEMU's message, the domain keeps running
// and no partial snapshot is left.
func TestSnapshotENOSPC(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "mounting a tmpfs needs root")
	}
	c := connectSystem(t)
	d := NewDriver(c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := t.TempDir()
	// The booted overlay takes about 1 MiB; the vmstate of 256 MiB of RAM
	// some 90 MiB.
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	g := startGuest(t, d, guestSpec(t, uniqueName(), 256, newOverlay(t, dir)), false)

	err := d.SaveSnapshot(ctx, g.name, "full")
	if err == nil {
		t.Fatal("SaveSnapshot on a full disk succeeded")
	}
	t.Logf("SaveSnapshot on a full disk: %v", err)
	var je *qmp.JobError
	if !errors.As(err, &je) || !errors.Is(err, syscall.ENOSPC) || errors.Is(err, sandbox.ErrSnapshotExists) {
		t.Errorf("error %v: want the job's error and ENOSPC", err)
	}
	if st := qemuStatus(t, c, g.name); st != "running" {
		t.Errorf("QEMU status after the failed save = %q, want running", st)
	}
	if _, err := g.agent.Ping(ctx); err != nil {
		t.Errorf("agent after the failed save: %v", err)
	}
	if snaps := snapshotTags(t, g.overlay); len(snaps) != 0 {
		t.Errorf("partial snapshot left: %+v", snaps)
	}
	if err := d.DeleteSnapshot(ctx, g.name, "full"); !errors.Is(err, sandbox.ErrNoSnapshot) {
		t.Errorf("DeleteSnapshot after the failed save = %v, want ErrNoSnapshot", err)
	}
}

// TestSnapshotGoneDomain: operations on a domain that does not exist say
// the sandbox is not running.
func TestSnapshotGoneDomain(t *testing.T) {
	c := connectSystem(t)
	d := NewDriver(c)
	ctx := context.Background()
	name := uniqueName()
	for op, err := range map[string]error{
		"save":   d.SaveSnapshot(ctx, name, "t"),
		"load":   d.LoadSnapshot(ctx, name, "t"),
		"delete": d.DeleteSnapshot(ctx, name, "t"),
		"pause":  d.PauseDomain(ctx, name),
		"resume": d.ResumeDomain(ctx, name),
	} {
		if !errors.Is(err, sandbox.ErrNotRunning) {
			t.Errorf("%s of a missing domain: %v, want ErrNotRunning", op, err)
		}
	}
}

// TestMonitorEventsReconnect: two readers of one domain share libvirt's
// one QMP event registration (with RunJob as a third), and the stream
// survives a restart of (a private) libvirtd with a gap marker in between.
func TestMonitorEventsReconnect(t *testing.T) {
	p, c, name, _ := startWatchedDomain(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var readers [2]<-chan qmp.Event
	for i := range readers {
		ev, err := c.MonitorEvents(ctx, name)
		if err != nil {
			t.Fatalf("MonitorEvents %d: %v", i, err)
		}
		readers[i] = ev
	}
	m := qmp.New(c, name, qmp.Options{})
	// go-qemu's generated types and its Domain helpers over libvirt's
	// connection.
	if st, err := raw.NewMonitor(m).QueryStatus(); err != nil || st.Status != raw.RunStateRunning || !st.Running {
		t.Errorf("raw QueryStatus = %+v, %v", st, err)
	}
	gd, err := qemu.NewDomain(m, name)
	if err != nil {
		t.Fatalf("qemu.NewDomain: %v", err)
	}
	if st, err := gd.Status(); err != nil || st != qemu.StatusRunning {
		t.Errorf("qemu.Domain.Status = %v, %v", st, err)
	}
	if v, err := gd.Version(); err != nil || !strings.Contains(v, ".") {
		t.Errorf("qemu.Domain.Version = %q, %v", v, err)
	}
	if _, err := gd.Run(goqmp.Command{Execute: "no-such-command"}); err == nil || !strings.Contains(err.Error(), "CommandNotFound") {
		t.Errorf("unknown command through go-qemu: %v", err)
	}
	// A job that fails at once (this BIOS-only domain has no disk).
	job := func(id string) {
		t.Helper()
		err := m.SnapshotSave(ctx, id, "t", "none", []string{})
		var je *qmp.JobError
		if !errors.As(err, &je) || je.Desc != "At least one device is required for snapshot" {
			t.Fatalf("SnapshotSave: %v", err)
		}
		jobs, err := m.QueryJobs(ctx)
		if err != nil || len(jobs) != 0 {
			t.Errorf("jobs left after RunJob: %+v, %v", jobs, err)
		}
	}
	// next skips to the event wanted: a gap, or id's conclusion.
	next := func(events <-chan qmp.Event, gap bool, id string) {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("event stream closed waiting for gap=%v %q", gap, id)
				}
				if gap && ev.Gap {
					return
				}
				if !gap && ev.Name == "JOB_STATUS_CHANGE" && string(ev.Data) == `{"status":"concluded","id":"`+id+`"}` {
					if ev.Time.IsZero() {
						t.Errorf("event without a timestamp: %+v", ev)
					}
					return
				}
				t.Logf("skipping %s %s gap=%v", ev.Name, ev.Data, ev.Gap)
			case <-ctx.Done():
				t.Fatalf("no event gap=%v %q", gap, id)
			}
		}
	}
	job("j1")
	for _, r := range readers {
		next(r, false, "j1")
	}
	p.kill()
	p.start()
	for _, r := range readers {
		next(r, true, "")
	}
	job("j2")
	for _, r := range readers {
		next(r, false, "j2")
	}
	cancel()
	for _, r := range readers {
		for range r { // closed once ctx ended
		}
	}
	if err := gd.Close(); err != nil {
		t.Errorf("qemu.Domain.Close: %v", err)
	}
}

// TestDomainLocks: snapshot operations on one domain are serialised,
// others proceed, and a waiter gives up with its ctx.
func TestDomainLocks(t *testing.T) {
	var l domainLocks
	ctx := context.Background()
	unlockA, err := l.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := l.lock(ctx, "b") // another domain: not blocked
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.lock(short, "a"); !errors.Is(err, context.Canceled) {
		t.Errorf("second lock of a with a cancelled ctx: %v", err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := l.lock(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	select {
	case <-got:
		t.Fatal("second lock of a did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	unlockA()
	(<-got)()
	unlockB()
	if len(l.m) != 0 {
		t.Errorf("locks left: %v", l.m)
	}
}

// TestSnapshotRefusesRawDisk: a writable raw disk (as UEFI vars in
// pflash would be) cannot hold a snapshot; the save is refused up front
// with the file's name and nothing is sent to QEMU's snapshot job.
func TestSnapshotRefusesRawDisk(t *testing.T) {
	c := connectSystem(t)
	d := NewDriver(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw := filepath.Join(t.TempDir(), "vars.raw")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	name := uniqueName()
	xml := strings.Replace(biosDomainXML(name, "sb-"+name), "<devices>", `<devices>
    <disk type='file' device='disk'><driver name='qemu' type='raw'/><source file='`+raw+`'/><target dev='vdb' bus='virtio'/></disk>`, 1)
	if _, err := c.CreateDomain(ctx, xml, CreateOptions{}); err != nil {
		t.Fatalf("CreateDomain: %v", err)
	}
	t.Cleanup(func() {
		if err := c.DestroyDomain(context.Background(), name); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	err := d.SaveSnapshot(ctx, name, "t")
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), raw) {
		t.Fatalf("SaveSnapshot with a raw disk = %v, want ErrInvalid naming %s", err, raw)
	}
	t.Log(err)
	m := qmp.New(c, name, qmp.Options{})
	if jobs, err := m.QueryJobs(ctx); err != nil || len(jobs) != 0 {
		t.Errorf("jobs after the refused save: %+v, %v", jobs, err)
	}
	if st := qemuStatus(t, c, name); st != "running" {
		t.Errorf("status %q after the refused save", st)
	}
}
