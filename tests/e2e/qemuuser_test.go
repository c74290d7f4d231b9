package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// qemuRange is the --qemu-uid-range of TestQEMUUser: its first id is the
// clone group, the rest one uid per sandbox. Ids of its own, apart from
// anything a host account or another test daemon uses.
const (
	qemuFirst = 301000
	qemuLast  = 301999
)

// wireQEMU is the "qemu" object of GET /v1/sandboxes/{id}.
type wireQEMU struct {
	PID           int      `json:"pid"`
	UID           uint32   `json:"uid"`
	GID           uint32   `json:"gid"`
	Groups        []uint32 `json:"groups"`
	Seccomp       int      `json:"seccomp"`
	ConfiguredUID uint32   `json:"configured_uid"`
}

// qemuOf returns the qemu object of sandbox ref (failing without one).
func (d *daemon) qemuOf(ref string) wireQEMU {
	d.t.Helper()
	var v struct {
		QEMU *wireQEMU `json:"qemu"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &v)
	if v.QEMU == nil {
		d.t.Fatalf("sandbox %s: no qemu object in GET /v1/sandboxes/%s", ref, ref)
	}
	return *v.QEMU
}

// confined asserts that sandbox ref's QEMU runs as its own uid of the
// range (gid: its uid, or the clone group for a clone), with no
// supplementary group but that gid (libvirt's setgroups), seccomp mode 2 and QEMU's -sandbox on, and that
// the host's /proc agrees; it returns the process.
func (d *daemon) confined(what, ref string, clone bool) wireQEMU {
	d.t.Helper()
	q := d.qemuOf(ref)
	wantGID := q.UID
	if clone {
		wantGID = qemuFirst
	}
	if q.UID <= qemuFirst || q.UID > qemuLast || q.UID != q.ConfiguredUID || q.GID != wantGID || len(q.Groups) != 1 || q.Groups[0] != wantGID || q.Seccomp != 2 {
		d.t.Errorf("%s: qemu %+v; want uid = configured uid in %d..%d, gid %d, groups only [%[5]d], seccomp 2", what, q, qemuFirst+1, qemuLast, wantGID)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", q.PID))
	if err != nil {
		d.t.Fatalf("%s: %v", what, err)
	}
	uidLine := fmt.Sprintf("Uid:\t%d\t%d\t%d\t%d\n", q.UID, q.UID, q.UID, q.UID)
	if !bytes.Contains(status, []byte(uidLine)) || !bytes.Contains(status, []byte("\nSeccomp:\t2\n")) {
		d.t.Errorf("%s: /proc/%d/status lacks %q or Seccomp 2:\n%s", what, q.PID, uidLine, status)
	}
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", q.PID))
	if !bytes.Contains(cmdline, []byte("\x00-sandbox\x00on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny\x00")) {
		d.t.Errorf("%s: QEMU's command line lacks -sandbox on,…: %q", what, cmdline)
	}
	return q
}

// asUser runs argv on the host as uid:gid with no supplementary groups
// (what a QEMU of that user could do) and returns its exit code and
// stderr.
func asUser(t *testing.T, uid, gid uint32, argv ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("run %v as %d: %v", argv, uid, err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// TestQEMUUser: under serve --qemu-uid-range every QEMU runs as a uid of
// its own (not root), different per sandbox, with seccomp on — for a cold
// create, a restore of a snapshot, a warm clone of a memory template (with
// the clone group), a resume from disk and a start after a stop. As QEMU's
// user on the host, a sandbox's own overlay reads, another sandbox's
// overlay, the state dir's listing and the store do not (EACCES); a state
// dir others cannot reach is refused at start with what to do; after
// rm no process or file holds a uid of the range.
func TestQEMUUser(t *testing.T) {
	img := testenv.ReachableImage(t)
	body := func(extra string) string {
		b, _ := json.Marshal(img)
		s := `{"image":` + string(b) + `,"accel":"tcg"`
		if extra != "" {
			s += "," + extra
		}
		return s + "}"
	}
	rng := fmt.Sprintf("%d-%d", qemuFirst, qemuLast)

	// A state dir QEMU's users cannot reach: refused, saying what to do.
	bad := newDaemon(t, "--qemu-uid-range", rng)
	private := filepath.Join(testenv.PassableTempDir(t), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	bad.State = filepath.Join(private, "state")
	cmd := exec.Command(agentboxBin, bad.ServeArgs()...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	out, err := cmd.CombinedOutput()
	if want := " is mode 0700: chmod o+x it, choose another --state-dir, or --qemu-uid-range off"; err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("serve with a state dir under a 0700 directory: %v, %s; want the refusal %q", err, out, want)
	}

	d := newDaemon(t, "--qemu-uid-range", rng)
	d.State = filepath.Join(testenv.PassableTempDir(t), "state")
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	a := d.create(body(`"name":"qa"`))
	b := d.create(body(`"name":"qb"`))
	qa := d.confined("cold create qa", a.ID, false)
	qb := d.confined("cold create qb", b.ID, false)
	if qa.UID == qb.UID {
		t.Fatalf("qa and qb both run as uid %d", qa.UID)
	}

	// From the host as qa's QEMU user.
	overlay := func(id string) string { return filepath.Join(d.State, "sandboxes", id, "overlay.qcow2") }
	if code, stderr := asUser(t, qa.UID, qa.GID, "head", "-c", "4", overlay(a.ID)); code != 0 {
		t.Errorf("qa's user reading its own overlay: exit %d, %s", code, stderr)
	}
	for _, c := range []struct{ what, path string }{
		{"qb's overlay", overlay(b.ID)},
		{"the state dir", d.State},
		{"the store", filepath.Join(d.State, "state.db")},
		{"qb's directory", filepath.Join(d.State, "sandboxes", b.ID)},
	} {
		argv := []string{"head", "-c", "4", c.path}
		if fi, err := os.Stat(c.path); err == nil && fi.IsDir() {
			argv = []string{"ls", c.path}
		}
		code, stderr := asUser(t, qa.UID, qa.GID, argv...)
		if code == 0 || !strings.Contains(stderr, "Permission denied") {
			t.Errorf("qa's user reading %s (%s): exit %d, %q; want Permission denied (EACCES)", c.what, c.path, code, stderr)
		}
	}

	// A restore: a new uid.
	d.save(a.ID, "qsnap")
	r := d.restore("qsnap", `{"name":"qr"}`)
	qr := d.confined("restore", r.ID, false)
	if qr.UID == qa.UID || qr.UID == qb.UID {
		t.Errorf("restored sandbox runs as uid %d, its source as %d, qb as %d: want its own", qr.UID, qa.UID, qb.UID)
	}
	d.out(r.ID, "true")

	// A warm clone of a memory template: its own uid, the clone group.
	w := d.create(body(`"warm":true`))
	qw := d.confined("warm clone", w.ID, true)
	if qw.UID == qa.UID || qw.UID == qb.UID || qw.UID == qr.UID {
		t.Errorf("warm clone runs as uid %d, taken already", qw.UID)
	}
	d.out(w.ID, "true")

	// Pause to disk and resume: the same uid again.
	if r := d.cli(nil, "pause", "--to-disk", "qa"); r.code != 0 {
		t.Fatalf("pause --to-disk: exit %d, %s", r.code, r.stderr)
	}
	if r := d.cli(nil, "resume", "qa"); r.code != 0 {
		t.Fatalf("resume: exit %d, %s", r.code, r.stderr)
	}
	if q := d.confined("resume from disk", a.ID, false); q.UID != qa.UID {
		t.Errorf("after resume from disk: uid %d, before %d", q.UID, qa.UID)
	}
	d.out(a.ID, "true")

	// Stop and start: the same uid again.
	if r := d.cli(nil, "stop", "qb"); r.code != 0 {
		t.Fatalf("stop: exit %d, %s", r.code, r.stderr)
	}
	if r := d.cli(nil, "start", "qb"); r.code != 0 {
		t.Fatalf("start: exit %d, %s", r.code, r.stderr)
	}
	if q := d.confined("start after stop", b.ID, false); q.UID != qb.UID || q.PID == qb.PID {
		t.Errorf("after stop and start: uid %d pid %d, before uid %d pid %d (want the same uid, a new process)", q.UID, q.PID, qb.UID, qb.PID)
	}

	// rm: nothing runs as, or is owned by, a uid of the range (the
	// snapshot's overlay and the template's are the daemon's again).
	for _, id := range []string{a.ID, b.ID, r.ID, w.ID} {
		if r := d.cli(nil, "rm", "-f", id); r.code != 0 {
			t.Fatalf("rm %s: exit %d, %s", id, r.code, r.stderr)
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if fi, err := os.Stat("/proc/" + e.Name()); err == nil {
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid > qemuFirst && uid <= qemuLast {
				t.Errorf("after rm: process %s runs as uid %d of the range", e.Name(), uid)
			}
		}
	}
	filepath.Walk(d.State, func(path string, fi os.FileInfo, err error) error {
		if err == nil {
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid > qemuFirst && uid <= qemuLast {
				t.Errorf("after rm: %s is owned by uid %d of the range", path, uid)
			}
		}
		return nil
	})
}
