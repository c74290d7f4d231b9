package e2e

// Snapshots, restore and warm starts through a real `agentbox serve` and
// real TCG guests: processes and files continue, forks diverge, snapshots
// outlive their sandbox and the daemon, the restored guest gets the host's
// time and its own identity, and every error leaves nothing behind.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wireSnapshot is the API's Snapshot, spelled independently.
type wireSnapshot struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Sandbox     string `json:"sandbox"`
	SandboxName string `json:"sandbox_name"`
	// SourceRemoved: the sandbox has been removed since.
	SourceRemoved bool      `json:"source_removed"`
	Machine       string    `json:"machine"`
	VCPUs         int       `json:"vcpus"`
	MemoryMiB     int       `json:"memory_mib"`
	CreatedAt     time.Time `json:"created_at"`
	SaveMs        int64     `json:"save_ms"`
	VMStateBytes  int64     `json:"vmstate_bytes"`
	DiskBytes     int64     `json:"disk_bytes"`
	Image         struct {
		Digest string `json:"digest"`
		Dir    string `json:"dir"`
	} `json:"image"`
	Limits struct {
		TTLSeconds int64 `json:"ttl_seconds"`
	} `json:"limits"`
}

// save snapshots sandbox ref as name.
func (d *daemon) save(ref, name string) wireSnapshot {
	d.t.Helper()
	var s wireSnapshot
	hdr := d.callJSON("POST", "/v1/sandboxes/"+ref+"/snapshots", `{"name":"`+name+`"}`, http.StatusCreated, &s)
	if s.Name != name || len(s.ID) != 12 || s.VMStateBytes <= 0 || s.SaveMs <= 0 {
		d.t.Fatalf("saved snapshot %+v: want name %s, an ID, vmstate bytes and a save time", s, name)
	}
	if loc := hdr.Get("Location"); loc != "/v1/snapshots/"+name {
		d.t.Errorf("save: Location %q", loc)
	}
	return s
}

// restore restores snapshot name into a new sandbox (body: the JSON
// request) and tracks it.
func (d *daemon) restore(name, body string) wireSandbox {
	d.t.Helper()
	var sb wireSandbox
	d.callJSON("POST", "/v1/snapshots/"+name+"/restore", body, http.StatusCreated, &sb)
	d.Track(sb.ID)
	if sb.State != "running" || sb.Domain != "agentbox-"+sb.ID {
		d.t.Fatalf("restored sandbox %+v: want running", sb)
	}
	return sb
}

// snapshots lists the snapshots (q: a query string or "").
func (d *daemon) snapshots(q string) []wireSnapshot {
	d.t.Helper()
	var list struct {
		Snapshots []wireSnapshot `json:"snapshots"`
	}
	d.callJSON("GET", "/v1/snapshots"+q, nil, http.StatusOK, &list)
	return list.Snapshots
}

// out runs cmd (argv JSON) in ref, wants exit 0 and returns stdout.
func (d *daemon) out(ref string, argv ...string) string {
	d.t.Helper()
	cmd, _ := json.Marshal(argv)
	r := d.mustExec(ref, `{"cmd":`+string(cmd)+`}`)
	if r.exit == nil || r.exit.ExitCode != 0 {
		d.t.Fatalf("exec %v in %s: exit %+v, error %+v, stderr %q", argv, ref, r.exit, r.err, r.stderr)
	}
	return string(r.stdout)
}

// exists reports whether path exists in ref.
func (d *daemon) exists(ref, path string) bool {
	d.t.Helper()
	r := d.mustExec(ref, `{"cmd":["test","-e","`+path+`"]}`)
	return r.exit != nil && r.exit.ExitCode == 0
}

// counter is a python process that counts in memory, escaped from the
// agent's process group (setsid) so it is the guest's own process, and
// publishes "PID COUNT" in /run/count every 50 ms.
const counter = `import os, time
i = 0
while True:
    i += 1
    with open('/run/count.tmp', 'w') as f:
        f.write('%d %d' % (os.getpid(), i))
    os.rename('/run/count.tmp', '/run/count')
    time.sleep(0.05)
`

// count reads the counter's pid and value in ref.
func (d *daemon) count(ref string) (pid, n int) {
	d.t.Helper()
	f := strings.Fields(d.out(ref, "cat", "/run/count"))
	if len(f) != 2 {
		d.t.Fatalf("/run/count in %s: %q", ref, f)
	}
	pid, _ = strconv.Atoi(f[0])
	n, _ = strconv.Atoi(f[1])
	return pid, n
}

// guestClockOffset returns guest time minus host time, bounded by the
// host times before and after the exec (0 when the guest's reading falls
// between them).
func (d *daemon) guestClockOffset(ref string) time.Duration {
	d.t.Helper()
	before := time.Now()
	s := strings.TrimSpace(d.out(ref, "date", "+%s.%N"))
	after := time.Now()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		d.t.Fatalf("guest date %q: %v", s, err)
	}
	g := time.Unix(0, int64(f*1e9))
	switch {
	case g.Before(before):
		return g.Sub(before)
	case g.After(after):
		return g.Sub(after)
	}
	return 0
}

// TestSnapshotRestore: a live snapshot of a sandbox running a counting
// python process and holding a file; two restores that continue from that
// instant and diverge; the host's time and a new identity in the forks;
// the snapshot outlives its sandbox and a daemon restart; errors for a
// stopped sandbox and a duplicate name; removal leaves nothing.
func TestSnapshotRestore(t *testing.T) {
	d := startDaemon(t)
	src := d.create(createBody(t, `"name":"src","memory_mib":256,"limits":{"ttl_seconds":3600}`))
	d.out(src.ID, "sh", "-c", "echo before > /root/before")
	d.out(src.ID, "sh", "-c", "setsid python3 -c \"$0\" </dev/null >/dev/null 2>&1 &", counter)
	var pid0, n0 int
	testenv.WaitFor(t, time.Minute, "the counter to pass 20", func() bool {
		if !d.exists(src.ID, "/run/count") {
			return false
		}
		pid0, n0 = d.count(src.ID)
		return n0 > 20
	})
	srcHost := strings.TrimSpace(d.out(src.ID, "hostname"))
	srcMachineID := strings.TrimSpace(d.out(src.ID, "sh", "-c", "cat /etc/machine-id 2>/dev/null || true"))

	snap := d.save("src", "cp1")
	saved := time.Now()
	if snap.Sandbox != src.ID || snap.SandboxName != "src" || snap.MemoryMiB != 256 || snap.Machine == "" || snap.Limits.TTLSeconds != 3600 {
		t.Errorf("snapshot %+v: want sandbox %s (src), 256 MiB, a machine, the source's ttl", snap, src.ID)
	}
	t.Logf("snapshot of a 256 MiB guest: save %d ms, vmstate %d bytes, disk %d bytes", snap.SaveMs, snap.VMStateBytes, snap.DiskBytes)
	// The source kept running; what it does now is not in the snapshot.
	d.out(src.ID, "sh", "-c", "echo after > /root/after")
	if _, n := d.count(src.ID); n < n0 {
		t.Errorf("source counter went back from %d to %d", n0, n)
	}
	d.apiError("POST", "/v1/sandboxes/src/snapshots", "application/json", []byte(`{"name":"cp1"}`), http.StatusConflict, "name_taken")

	// Fork 1, through the CLI.
	r := d.cli(nil, "restore", "--name", "fork1", "--label", "fork=1", "cp1")
	if r.code != 0 {
		t.Fatalf("agentbox restore: exit %d, stderr %s", r.code, r.stderr)
	}
	f1 := d.get(strings.TrimSpace(string(r.stdout)))
	d.Track(f1.ID)
	if f1.Name != "fork1" || f1.State != "running" || f1.Labels["fork"] != "1" || f1.MemoryMiB != 256 || f1.Limits.TTLSeconds != 3600 {
		t.Fatalf("fork1 %+v: want running, name fork1, label fork=1, 256 MiB, ttl 3600 from the snapshot", f1)
	}
	pid1, n1 := d.count(f1.ID)
	if pid1 != pid0 || n1 < n0 {
		t.Errorf("fork1's counter: pid %d count %d; want the source's process %d continuing from at least %d", pid1, n1, pid0, n0)
	}
	testenv.WaitFor(t, time.Minute, "fork1's counter to keep counting", func() bool { _, n := d.count(f1.ID); return n > n1 })
	if !d.exists(f1.ID, "/root/before") || d.exists(f1.ID, "/root/after") {
		t.Errorf("fork1: /root/before exists %v (want true), /root/after exists %v (want false)", d.exists(f1.ID, "/root/before"), d.exists(f1.ID, "/root/after"))
	}
	if h := strings.TrimSpace(d.out(f1.ID, "hostname")); h != f1.Domain || h == srcHost {
		t.Errorf("fork1 hostname %q; want %q (source: %q)", h, f1.Domain, srcHost)
	}
	if srcMachineID != "" {
		if m := strings.TrimSpace(d.out(f1.ID, "cat", "/etc/machine-id")); len(m) != 32 || m == srcMachineID {
			t.Errorf("fork1 machine-id %q; want a new 32-hex id (source: %q)", m, srcMachineID)
		}
	}

	// Fork 2, restored at least 20 s after the save: without the restore
	// setting it, the guest clock would be that far behind.
	if wait := 20*time.Second - time.Since(saved); wait > 0 {
		time.Sleep(wait)
	}
	f2 := d.restore("cp1", `{"name":"fork2"}`)
	if off := d.guestClockOffset(f2.ID); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("fork2 restored %s after the save: guest clock off by %s, want within 2 s", time.Since(saved).Round(time.Second), off)
	}
	if off := d.guestClockOffset(f1.ID); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("fork1: guest clock off by %s, want within 2 s", off)
	}
	// The forks are independent.
	d.out(f1.ID, "sh", "-c", "echo one > /root/fork")
	d.out(f2.ID, "sh", "-c", "echo two > /root/fork")
	if a, b := d.out(f1.ID, "cat", "/root/fork"), d.out(f2.ID, "cat", "/root/fork"); a != "one\n" || b != "two\n" {
		t.Errorf("forks read %q and %q, want one and two", a, b)
	}
	if d.exists(src.ID, "/root/fork") {
		t.Error("a fork's file appeared in the source")
	}
	if h1, h2 := d.out(f1.ID, "hostname"), d.out(f2.ID, "hostname"); h1 == h2 {
		t.Errorf("two forks share the hostname %q", h1)
	}

	// A stopped sandbox cannot be snapshotted.
	d.call("POST", "/v1/sandboxes/fork1/stop", nil, http.StatusOK)
	e := d.apiError("POST", "/v1/sandboxes/fork1/snapshots", "application/json", []byte(`{"name":"late"}`), http.StatusConflict, "sandbox_not_running")
	if !strings.Contains(e.Message, "only a running sandbox") {
		t.Errorf("snapshot of a stopped sandbox: %q; want it to say only a running sandbox can be snapshotted", e.Message)
	}

	// A snapshot removed while its sandbox runs leaves the overlay (QMP
	// snapshot-delete through the driver).
	tmp := d.save(src.ID, "tmp")
	if list := d.snapshots("?sandbox=src"); len(list) != 2 {
		t.Errorf("snapshots of src: %+v; want cp1 and tmp", list)
	}
	d.call("DELETE", "/v1/snapshots/tmp", nil, http.StatusNoContent)
	if out, err := exec.Command("qemu-img", "snapshot", "-U", "-l", filepath.Join(d.State, "sandboxes", src.ID, "overlay.qcow2")).CombinedOutput(); err != nil || strings.Contains(string(out), "s"+tmp.ID) || !strings.Contains(string(out), "s"+snap.ID) {
		t.Errorf("the overlay after a live delete of tmp: %v\n%s\nwant cp1's tag only", err, out)
	}
	d.out(src.ID, "true")

	// The snapshot outlives its sandbox...
	d.call("DELETE", "/v1/sandboxes/src?force=true", nil, http.StatusNoContent)
	d.assertGone(src.ID)
	if list := d.snapshots("?sandbox=" + src.ID); len(list) != 1 || list[0].Name != "cp1" || !list[0].SourceRemoved || list[0].SandboxName != "src" {
		t.Fatalf("snapshots of the removed source: %+v; want cp1 of src, source_removed", list)
	}
	kept := filepath.Join(d.State, "snapshots", src.ID+".qcow2")
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("the removed source's overlay was not kept for its snapshot: %v", err)
	}
	// ...and a daemon restart.
	if code := d.Terminate(); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	f3 := d.restore("cp1", `{}`)
	if !d.exists(f3.ID, "/root/before") || d.exists(f3.ID, "/root/after") {
		t.Error("fork3 (after the source's removal and a daemon restart) does not hold the snapshot's files")
	}
	if pid, n := d.count(f3.ID); pid != pid0 || n < n0 {
		t.Errorf("fork3's counter: pid %d count %d; want %d from at least %d", pid, n, pid0, n0)
	}

	r = d.cli(nil, "snapshot", "ls")
	if r.code != 0 || !strings.Contains(string(r.stdout), "cp1") || !strings.HasPrefix(string(r.stdout), "NAME") || !strings.Contains(string(r.stdout), " src (removed) ") {
		t.Errorf("agentbox snapshot ls: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	acts := map[string]bool{}
	for _, e := range d.audit("") {
		if e.Error == "" {
			acts[e.Action] = true
		}
	}
	if !acts["snapshot.save"] || !acts["restore"] {
		t.Errorf("audit actions %v; want snapshot.save and restore", acts)
	}
	if r = d.cli(nil, "snapshot", "rm", "cp1"); r.code != 0 || string(r.stdout) != "cp1\n" {
		t.Errorf("agentbox snapshot rm cp1: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("the kept overlay outlived its last snapshot: %v", err)
	}
	d.apiError("GET", "/v1/snapshots/cp1", "", nil, http.StatusNotFound, "not_found")
	d.apiError("POST", "/v1/snapshots/cp1/restore", "application/json", []byte(`{}`), http.StatusNotFound, "not_found")
	// The forks run on without it.
	d.out(f2.ID, "true")
}

// TestSnapshotErrors: a restore whose file is damaged or gone, or whose
// image changed, fails clearly and leaves nothing; a 1 GiB guest saves.
func TestSnapshotErrors(t *testing.T) {
	// A private copy of the test image that the test may change.
	img := filepath.Join(t.TempDir(), "image")
	if err := os.Mkdir(img, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(testenv.Image(t))
	for _, e := range entries {
		testenv.CopyFile(t, filepath.Join(testenv.Image(t), e.Name()), filepath.Join(img, e.Name()))
	}
	body := func(extra string) string {
		b, _ := json.Marshal(img)
		return `{"image":` + string(b) + `,"accel":"tcg",` + extra + `}`
	}
	d := startDaemon(t)
	big := d.create(body(`"name":"big","memory_mib":1024`))
	// Touch 600 MiB of guest memory so the saved state is large.
	d.out(big.ID, "python3", "-c", "b = bytearray(600 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time; time.sleep(0.1)")
	s := d.save("big", "big1")
	t.Logf("snapshot of a 1 GiB guest: save %d ms, vmstate %d bytes, disk %d bytes", s.SaveMs, s.VMStateBytes, s.DiskBytes)
	if s.MemoryMiB != 1024 {
		t.Errorf("1 GiB snapshot: %+v", s)
	}
	d.out(big.ID, "true") // still running
	d.call("DELETE", "/v1/sandboxes/big?force=true", nil, http.StatusNoContent)
	kept := filepath.Join(d.State, "snapshots", big.ID+".qcow2")

	// A damaged file: restore fails with 422 and nothing is made.
	orig := kept + ".orig"
	if err := os.Rename(kept, orig); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kept, []byte("not a qcow2 image"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := d.apiError("POST", "/v1/snapshots/big1/restore", "application/json", []byte(`{"name":"x"}`), http.StatusUnprocessableEntity, "snapshot_unusable")
	if !strings.Contains(e.Message, "damaged") {
		t.Errorf("restore of a damaged snapshot: %q; want it to say the file is damaged", e.Message)
	}
	// A file that is gone.
	os.Remove(kept)
	e = d.apiError("POST", "/v1/snapshots/big1/restore", "application/json", []byte(`{"name":"x"}`), http.StatusUnprocessableEntity, "snapshot_unusable")
	if !strings.Contains(e.Message, "gone") {
		t.Errorf("restore of a snapshot whose file is gone: %q; want it to say so", e.Message)
	}
	if sbs := d.list(""); len(sbs) != 0 {
		t.Errorf("failed restores left sandboxes: %+v", sbs)
	}
	testenv.AssertNoLeaks(t, d.State, d.Runtime)
	if err := os.Rename(orig, kept); err != nil {
		t.Fatal(err)
	}

	// The image changed: restore is refused.
	manifest := filepath.Join(img, "manifest.toml")
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(manifest, 0o644)
	if err := os.WriteFile(manifest, append(data, []byte("\n# changed\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	e = d.apiError("POST", "/v1/snapshots/big1/restore", "application/json", []byte(`{}`), http.StatusUnprocessableEntity, "snapshot_unusable")
	if !strings.Contains(e.Message, "exact image") {
		t.Errorf("restore onto a changed image: %q; want it to say a snapshot restores only onto its exact image", e.Message)
	}
	if sbs := d.list(""); len(sbs) != 0 {
		t.Errorf("a refused restore left sandboxes: %+v", sbs)
	}
	d.call("DELETE", "/v1/snapshots/big1", nil, http.StatusNoContent)
	if _, err := os.Stat(kept); !os.IsNotExist(err) {
		t.Errorf("snapshot file left after its last snapshot went: %v", err)
	}
}

// TestSnapshotDiskFull: with the daemon's state on a small tmpfs, a save
// runs out of space: 507, the sandbox keeps running, no record and no
// partial snapshot are left.
func TestSnapshotDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=48m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.SkipOrFail(t, "mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", dir, err, out)
		}
	})
	d := newDaemon(t)
	d.State = dir
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	sb := d.create(createBody(t, `"memory_mib":256`))
	// Touch guest memory so the state does not fit in what is left.
	d.out(sb.ID, "python3", "-c", "b = bytearray(120 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nimport time; time.sleep(0.1)")
	e := d.apiError("POST", "/v1/sandboxes/"+sb.ID+"/snapshots", "application/json", []byte(`{"name":"full"}`), http.StatusInsufficientStorage, "insufficient_storage")
	if !strings.Contains(e.Message, "keeps running") {
		t.Errorf("disk full: %q; want it to say the sandbox keeps running", e.Message)
	}
	if got := d.get(sb.ID); got.State != "running" {
		t.Fatalf("after a failed save the sandbox is %s", got.State)
	}
	d.out(sb.ID, "true")
	if list := d.snapshots(""); len(list) != 0 {
		t.Errorf("a failed save left records: %+v", list)
	}
	out, err := exec.Command("qemu-img", "snapshot", "-U", "-l", filepath.Join(dir, "sandboxes", sb.ID, "overlay.qcow2")).CombinedOutput()
	if err != nil || strings.Contains(string(out), "ID") {
		t.Errorf("the overlay still lists snapshots after a failed save: %v %s", err, out)
	}
	d.apiError("GET", "/v1/snapshots/full", "", nil, http.StatusNotFound, "not_found")
}

// TestWarmCreate: two concurrent first warm creates build the template
// once; warm sandboxes are independent, have their own hostnames and the
// host's time; the template outlives them; a pool member (--warm-pool 1)
// becomes the next warm sandbox, and the daemon's shutdown destroys the
// refilled member (the cleanup's leak checks).
func TestWarmCreate(t *testing.T) {
	d := startDaemon(t, "--warm-pool", "1")
	var wg sync.WaitGroup
	warm := make([]wireSandbox, 2)
	errs := make([]string, 2)
	for i := range warm {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, body, _, err := d.roundTrip(t.Context(), "POST", "/v1/sandboxes", []byte(createBody(t, fmt.Sprintf(`"name":"warm%d","memory_mib":256,"warm":true`, i))), "application/json")
			if err != nil || st != http.StatusCreated || json.Unmarshal(body, &warm[i]) != nil {
				errs[i] = fmt.Sprintf("warm create %d: %d %v %s", i, st, err, body)
			}
			d.Track(warm[i].ID)
		}()
	}
	wg.Wait()
	for _, e := range errs {
		if e != "" {
			t.Fatal(e)
		}
	}
	if n := strings.Count(d.Log.String(), "warm template built"); n != 1 {
		t.Errorf("the daemon built %d warm templates for two concurrent first warm creates; want 1", n)
	}
	keys, _ := filepath.Glob(filepath.Join(d.State, "warm", "*", "manifest.json"))
	if len(keys) != 1 {
		t.Errorf("warm templates %v; want exactly one for one image and shape", keys)
	} else if man, _ := os.ReadFile(keys[0]); !strings.Contains(string(man), `"memory"`) {
		t.Errorf("the warm template is not a memory template (the default --warm-mode): %s", man)
	}
	for _, sb := range warm {
		if len(sb.Tainted) != 1 || sb.Tainted[0] != "custom-argv" {
			t.Errorf("warm sandbox %s: tainted %q; want [custom-argv] (memory template clone, QEMU passthrough)", sb.ID, sb.Tainted)
		}
	}
	if sbs := d.list(""); len(sbs) != 2 {
		t.Errorf("sandboxes after two warm creates: %+v; want just the two (the template's boot is gone)", sbs)
	}
	for _, sb := range warm {
		if h := strings.TrimSpace(d.out(sb.ID, "hostname")); h != sb.Domain {
			t.Errorf("warm sandbox %s: hostname %q, want %q", sb.ID, h, sb.Domain)
		}
		if off := d.guestClockOffset(sb.ID); off < -2*time.Second || off > 2*time.Second {
			t.Errorf("warm sandbox %s: guest clock off by %s", sb.ID, off)
		}
	}
	d.out(warm[0].ID, "sh", "-c", "echo 0 > /root/w")
	if d.exists(warm[1].ID, "/root/w") {
		t.Error("a file written in one warm sandbox appeared in the other")
	}
	// A third warm create takes the pool's member (restored from the kept
	// template once the first creates were done); the pool refills.
	refilled := func(n int) func() bool {
		return func() bool { return strings.Count(d.Log.String(), "warm pool refilled") >= n }
	}
	testenv.WaitFor(t, 2*time.Minute, "the warm pool to hold a member", refilled(1))
	w3 := d.create(createBody(t, `"memory_mib":256,"warm":true`))
	d.out(w3.ID, "true")
	if h := strings.TrimSpace(d.out(w3.ID, "hostname")); h != w3.Domain {
		t.Errorf("pooled warm sandbox: hostname %q, want %q", h, w3.Domain)
	}
	if off := d.guestClockOffset(w3.ID); off < -2*time.Second || off > 2*time.Second {
		t.Errorf("pooled warm sandbox: guest clock off by %s", off)
	}
	testenv.WaitFor(t, 2*time.Minute, "the warm pool to refill after a member was taken", refilled(2))
	if sbs := d.list(""); len(sbs) != 3 {
		t.Errorf("sandboxes: %+v; want 3", sbs)
	}

	// `warm ls` shows the template with its pooled member; a restarted
	// daemon refills the pool without waiting for a warm create.
	type wireWarm struct {
		Key       string `json:"key"`
		Pooled    int    `json:"pooled"`
		SizeBytes int64  `json:"size_bytes"`
		MemoryMiB int    `json:"memory_mib"`
	}
	warmList := func() []wireWarm {
		r := d.cli(nil, "warm", "ls", "--json")
		var l []wireWarm
		if r.code != 0 || json.Unmarshal(r.stdout, &l) != nil {
			t.Fatalf("agentbox warm ls --json: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		return l
	}
	if l := warmList(); len(l) != 1 || l[0].Pooled != 1 || l[0].SizeBytes <= 0 || l[0].MemoryMiB != 256 {
		t.Errorf("warm ls: %+v; want one 256 MiB template with one pooled sandbox", l)
	}
	before := strings.Count(d.Log.String(), "warm pool refilled")
	if code := d.Terminate(); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the warm pool to refill at daemon start", refilled(before+1))
	if l := warmList(); len(l) != 1 || l[0].Pooled != 1 {
		t.Errorf("warm ls after a restart: %+v; want the pool refilled", l)
	}
	// `warm rm --all` removes the template and destroys its pooled member.
	if r := d.cli(nil, "warm", "rm", "--all"); r.code != 0 || strings.TrimSpace(string(r.stdout)) != warmList0(t, keys) {
		t.Errorf("agentbox warm rm --all: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if l := warmList(); len(l) != 0 {
		t.Errorf("warm ls after rm --all: %+v", l)
	}
	if now, _ := filepath.Glob(filepath.Join(d.State, "warm", "*")); len(now) != 0 {
		t.Errorf("warm templates left after rm --all: %v", now)
	}
}

// warmList0 returns the key of the only template manifest in keys.
func warmList0(t *testing.T, keys []string) string {
	if len(keys) != 1 {
		t.Fatalf("templates %v", keys)
	}
	return filepath.Base(filepath.Dir(keys[0]))
}
