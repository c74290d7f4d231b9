package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// counterScript starts a python3 process, out of the agent's process
// group (setsid: a new agent session after a resume from disk ends the
// old session's commands), that counts in memory and publishes the count
// to /tmp/count every 50 ms; its pid goes to /tmp/count.pid.
const counterScript = `setsid python3 -c '
import os, time
n = 0
while True:
    n += 1
    open("/tmp/count.tmp", "w").write(str(n))
    os.replace("/tmp/count.tmp", "/tmp/count")
    time.sleep(0.05)
' </dev/null >/dev/null 2>&1 &
echo $! > /tmp/count.pid
while [ ! -s /tmp/count ]; do sleep 0.05; done`

// count reads the counter and the pid of the process counting.
func count(t *testing.T, sb *sandbox.Sandbox) (n int, pid string) {
	t.Helper()
	out, _, st := sh(t, sb, "cat /tmp/count; echo; cat /tmp/count.pid; kill -0 $(cat /tmp/count.pid) && echo alive", 10*time.Second)
	f := strings.Fields(out)
	if st.Code != 0 || len(f) != 3 || f[2] != "alive" {
		t.Fatalf("counter: %q, %+v: want count, pid, alive", out, st)
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		t.Fatal(err)
	}
	return n, f[1]
}

// waitCount waits until the counter passes above.
func waitCount(t *testing.T, sb *sandbox.Sandbox, above int, pid string) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, p := count(t, sb)
		if p != pid {
			t.Fatalf("the counting process is %s, was %s: it was started again", p, pid)
		}
		if n > above {
			return n
		}
		if time.Now().After(deadline) {
			t.Fatalf("the counter stays at %d (was %d before the pause)", n, above)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// qemuRSS sums the resident memory (bytes) of the QEMU processes of
// domain: the processes whose command line names it (-name guest=DOMAIN).
func qemuRSS(domain string) (rss int64, procs int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmd, []byte("guest="+domain+",")) && !bytes.Contains(cmd, []byte("guest="+domain+"\x00")) {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(status), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				rss += kb << 10
				procs++
			}
		}
	}
	return rss, procs
}

// guestUsed is the guest's used memory in bytes (MemTotal - MemAvailable).
func guestUsed(t *testing.T, sb *sandbox.Sandbox) int64 {
	t.Helper()
	out, _, _ := sh(t, sb, `awk '/^MemTotal:/{t=$2} /^MemAvailable:/{a=$2} END{print (t-a)*1024}' /proc/meminfo`, 10*time.Second)
	n, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("guest memory: %q", out)
	}
	return n
}

func hasDomain(t *testing.T, domain string) bool {
	return slices.Contains(testenv.Domains(t), domain)
}

// TestPauseResume: a process counting in memory keeps counting across a
// pause in memory and a pause to disk; the sandbox keeps its identity;
// QEMU is gone while paused to disk; the errors of the wrong state; a
// start after a stop keeps a file and not the processes.
func TestPauseResume(t *testing.T) {
	f := newFixture(t, testenv.Image(t))
	ctx := context.Background()
	sb := f.create(t, sandbox.Options{Name: "pausing"})
	id, name := sb.ID, sb.Name
	sh(t, sb, counterScript, 30*time.Second)
	n0, pid := count(t, sb)

	t.Run("InMemory", func(t *testing.T) {
		if err := f.mgr.Pause(ctx, sb, false, "test"); err != nil {
			t.Fatal(err)
		}
		r := sb.Record()
		if r.State != sandbox.StatePaused || r.Paused == nil || r.Paused.ToDisk {
			t.Fatalf("after pause: state %s, paused %+v; want paused in memory", r.State, r.Paused)
		}
		if _, err := sb.Exec(ctx, agentproto.ExecRequest{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, sandbox.ErrNotRunning) {
			t.Fatalf("exec on a paused sandbox: %v, want ErrNotRunning", err)
		}
		if err := f.mgr.Pause(ctx, sb, true, "test"); !errors.Is(err, sandbox.ErrConflict) || !strings.Contains(err.Error(), "resume it first") {
			t.Fatalf("pause of a paused sandbox: %v, want ErrConflict saying to resume it", err)
		}
		if err := f.mgr.Start(ctx, sb, sandbox.StartOptions{Image: f.img}); !errors.Is(err, sandbox.ErrConflict) {
			t.Fatalf("start of a paused sandbox: %v, want ErrConflict", err)
		}
		if err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{}); err != nil {
			t.Fatal(err)
		}
		if r := sb.Record(); r.State != sandbox.StateRunning || r.Paused != nil {
			t.Fatalf("after resume: state %s, paused %+v", r.State, r.Paused)
		}
		n0 = waitCount(t, sb, n0, pid)
	})

	t.Run("ToDisk", func(t *testing.T) {
		used := guestUsed(t, sb)
		rssBefore, procs := qemuRSS(sb.Domain)
		if procs != 1 {
			t.Fatalf("%d QEMU processes of %s, want 1", procs, sb.Domain)
		}
		n1, _ := count(t, sb)
		if err := f.mgr.Pause(ctx, sb, true, "test"); err != nil {
			t.Fatal(err)
		}
		r := sb.Record()
		p := r.Paused
		if r.State != sandbox.StatePaused || p == nil || !p.ToDisk || p.File != sb.Overlay || p.VMStateBytes <= 0 || p.DiskBytes <= 0 {
			t.Fatalf("after pause to disk: state %s, paused %+v", r.State, p)
		}
		if hasDomain(t, sb.Domain) {
			t.Fatalf("domain %s still exists while paused to disk", sb.Domain)
		}
		rssDuring, procs := qemuRSS(sb.Domain)
		t.Logf("guest used %d MiB; QEMU RSS %d MiB before, %d MiB in %d processes while paused to disk; saved state %d MiB (disk +%d MiB) in %d ms",
			used>>20, rssBefore>>20, rssDuring>>20, procs, p.VMStateBytes>>20, p.DiskBytes>>20, p.SaveMs)
		if drop := rssBefore - rssDuring; drop < used*8/10 {
			t.Fatalf("host memory dropped by %d bytes, want at least 80%% of the guest's used %d", drop, used)
		}
		if tags, err := overlay.Snapshots(ctx, sb.Overlay); err != nil || len(tags) != 1 || tags[0].Tag != p.Tag {
			t.Fatalf("overlay snapshots %+v, %v; want the saved state %s", tags, err, p.Tag)
		}
		time.Sleep(2 * time.Second) // the guest's clock must catch up with these
		if err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{Image: f.img}); err != nil {
			t.Fatal(err)
		}
		r = sb.Record()
		if r.State != sandbox.StateRunning || r.ID != id || r.Name != name || r.Overlay != sb.Overlay {
			t.Fatalf("after resume: %s %s %s %s", r.State, r.ID, r.Name, r.Overlay)
		}
		if !hasDomain(t, sb.Domain) {
			t.Fatal("no domain after the resume")
		}
		n2 := waitCount(t, sb, n1, pid)
		t.Logf("counter %d before the pause to disk, %d after", n1, n2)
		out, _, _ := sh(t, sb, "date +%s", 10*time.Second)
		guest, _ := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
		if d := time.Now().Unix() - guest; d < -5 || d > 5 {
			t.Fatalf("guest clock %d is %d s off the host's", guest, d)
		}
		if tags, err := overlay.Snapshots(ctx, sb.Overlay); err != nil || len(tags) != 0 {
			t.Fatalf("overlay snapshots after resume %+v, %v; want none", tags, err)
		}
		if err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{}); !errors.Is(err, sandbox.ErrConflict) || !strings.Contains(err.Error(), "not paused") {
			t.Fatalf("resume of a running sandbox: %v, want ErrConflict", err)
		}
	})

	t.Run("StartAfterStop", func(t *testing.T) {
		if err := f.mgr.Start(ctx, sb, sandbox.StartOptions{Image: f.img}); !errors.Is(err, sandbox.ErrConflict) || !strings.Contains(err.Error(), "running already") {
			t.Fatalf("start of a running sandbox: %v, want ErrConflict", err)
		}
		sh(t, sb, "echo kept > /root/kept && sync", 10*time.Second)
		if err := f.mgr.Stop(ctx, sb, "test"); err != nil {
			t.Fatal(err)
		}
		if err := f.mgr.Pause(ctx, sb, false, "test"); !errors.Is(err, sandbox.ErrConflict) || !strings.Contains(err.Error(), "start it again") {
			t.Fatalf("pause of a stopped sandbox: %v, want ErrConflict saying to start it", err)
		}
		if err := f.mgr.Start(ctx, sb, sandbox.StartOptions{Image: f.img}); err != nil {
			t.Fatal(err)
		}
		if r := sb.Record(); r.State != sandbox.StateRunning || r.ID != id || r.Name != name {
			t.Fatalf("after start: %s %s %s", r.State, r.ID, r.Name)
		}
		out, _, st := sh(t, sb, "cat /root/kept; if kill -0 $(cat /tmp/count.pid 2>/dev/null) 2>/dev/null; then echo counting; fi", 10*time.Second)
		if st.Code != 0 || out != "kept\n" {
			t.Fatalf("after start: %q %+v; want the file kept and no counter", out, st)
		}
	})
}

// TestResumeUnusableState: a resume from disk whose saved state is for
// another image, or gone, fails with the reason, leaves the sandbox
// failed and no domain; a failed sandbox starts again.
func TestResumeUnusableState(t *testing.T) {
	f := newFixture(t, testenv.Image(t))
	ctx := context.Background()
	sb := f.create(t, sandbox.Options{})

	if err := f.mgr.Pause(ctx, sb, true, "test"); err != nil {
		t.Fatal(err)
	}
	other := *f.img
	other.Digest = strings.Repeat("0", 64)
	err := f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{Image: &other})
	if !errors.Is(err, sandbox.ErrSnapshotUnusable) || !strings.Contains(err.Error(), "only loads on that image") {
		t.Fatalf("resume onto another image: %v, want ErrSnapshotUnusable", err)
	}
	if r := sb.Record(); r.State != sandbox.StateFailed || !strings.Contains(r.Reason, "only loads on that image") {
		t.Fatalf("after the failed resume: %s (%s), want failed with the reason", r.State, r.Reason)
	}
	if hasDomain(t, sb.Domain) {
		t.Fatal("a domain is left after the failed resume")
	}

	// A failed sandbox boots again (its saved state dropped).
	if err := f.mgr.Start(ctx, sb, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	if tags, err := overlay.Snapshots(ctx, sb.Overlay); err != nil || len(tags) != 0 {
		t.Fatalf("overlay snapshots after start %+v, %v; want none", tags, err)
	}

	if err := f.mgr.Pause(ctx, sb, true, "test"); err != nil {
		t.Fatal(err)
	}
	tag := sb.Record().Paused.Tag
	if err := overlay.DeleteSnapshotOffline(ctx, sb.Overlay, tag); err != nil {
		t.Fatal(err)
	}
	err = f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{Image: f.img})
	if !errors.Is(err, sandbox.ErrSnapshotUnusable) || !strings.Contains(err.Error(), "no longer holds "+tag) {
		t.Fatalf("resume of a deleted state: %v, want ErrSnapshotUnusable", err)
	}
	if r := sb.Record(); r.State != sandbox.StateFailed || hasDomain(t, sb.Domain) {
		t.Fatalf("after the failed resume: %s, domain left %v", r.State, hasDomain(t, sb.Domain))
	}

	// Damaged: the file is not a qcow2 image any more.
	if err := f.mgr.Start(ctx, sb, sandbox.StartOptions{Image: f.img}); err != nil {
		t.Fatal(err)
	}
	if err := f.mgr.Pause(ctx, sb, true, "test"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sb.Overlay, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = f.mgr.Resume(ctx, sb, sandbox.ResumeOptions{Image: f.img})
	if !errors.Is(err, sandbox.ErrSnapshotUnusable) || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("resume of a damaged state: %v, want ErrSnapshotUnusable saying damaged", err)
	}
	if r := sb.Record(); r.State != sandbox.StateFailed || hasDomain(t, sb.Domain) {
		t.Fatalf("after the failed resume: %s, domain left %v", r.State, hasDomain(t, sb.Domain))
	}
}
