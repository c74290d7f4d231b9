package isolation

// After an escape (issue 24): a guest that took over its QEMU runs as the
// sandbox's QEMU uid and plants what it can in the sandbox's directory,
// then waits for the daemon, which is root, to open, chown or serve it.
// The test re-executes this binary with that uid (syscall.Credential) to
// plant, triggers console, pause, resume and start through the API, and
// checks that no host file outside was read, served or changed.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// plantAsEnv names the variable that makes the test binary the plant-as
// helper: it holds a JSON list of operations, each [op, a, b] with op
// "unlink" (a), "rename" (a to b), "symlink" (b pointing to a) or "link"
// (b, a hard link of a); the helper runs each and prints a JSON list of
// errno names ("" for success).
const plantAsEnv = "AGENTBOX_ISOLATION_PLANT_AS"

// plantAsHelper runs the helper and reports whether it did.
func plantAsHelper() bool {
	spec := os.Getenv(plantAsEnv)
	if spec == "" {
		return false
	}
	var ops [][3]string
	if err := json.Unmarshal([]byte(spec), &ops); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out := make([]string, len(ops))
	for i, op := range ops {
		var err error
		switch op[0] {
		case "unlink":
			err = syscall.Unlink(op[1])
		case "rename":
			err = syscall.Rename(op[1], op[2])
		case "symlink":
			err = syscall.Symlink(op[1], op[2])
		case "link":
			err = syscall.Link(op[1], op[2])
		default:
			err = fmt.Errorf("unknown op %q", op[0])
		}
		var errno syscall.Errno
		switch {
		case err == nil:
		case errors.As(err, &errno):
			out[i] = unixErrName(errno)
		default:
			out[i] = err.Error()
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	return true
}

// plantAs runs ops as creds (the helper) and returns the errno names.
func plantAs(t *testing.T, c procCreds, ops [][3]string) []string {
	t.Helper()
	cmd := exec.Command(passableBinary(t), "-test.run=^$")
	cmd.Env = append(os.Environ(), plantAsEnv+"="+mustJSON(ops))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var got []string
	if err != nil || json.Unmarshal(out, &got) != nil || len(got) != len(ops) {
		t.Fatalf("the plant-as helper as uid %d gid %d: %v, stdout %q, stderr %q", c.uid, c.gid, err, out, stderr.String())
	}
	return got
}

// hostFile is a file of the host's a planted link points to, with what
// it must still be at the end.
type hostFile struct {
	path    string
	content string
	mode    os.FileMode
}

func (h hostFile) check(t *testing.T, when string) {
	t.Helper()
	fi, err := os.Lstat(h.path)
	if err != nil {
		t.Fatalf("%s: %s: %v", when, h.path, err)
	}
	b, err := os.ReadFile(h.path)
	st := fi.Sys().(*syscall.Stat_t)
	if err != nil || string(b) != h.content || st.Uid != 0 || st.Gid != 0 || fi.Mode() != h.mode {
		t.Errorf("%s: %s is %d:%d %v %q (%v), want 0:0 %v %q: changed through a planted link", when, h.path, st.Uid, st.Gid, fi.Mode(), b, err, h.mode, h.content)
	}
}

// TestQEMUEscapePlants: as sandbox A's QEMU uid, (1) nothing can be
// planted in A's directory, which is root's (0711): unlink, rename, link
// and symlink there all fail with EACCES; (2) in a directory that uid
// owned (as a daemon before issue 24 left it: the test gives it back),
// console.log becomes a symlink to a host secret, secrets.json another,
// and overlay.qcow2 a symlink to a host file (the real overlay renamed
// aside). Then GET console answers 422 naming the symlink, never the
// secret; GET the sandbox does not show it; a pause to disk saves into
// the real overlay QEMU holds open; the resume is refused (the saved
// state's file is a symlink: 422 snapshot_unusable); a start is refused
// (422, the overlay is a symbolic link) after taking the directory back
// (root's, 0711) and removing the planted console log, so the console is
// then empty. The host files keep their content, owner and mode
// throughout. A QEMU running as root fails the test (never a skip).
func TestQEMUEscapePlants(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "the QEMU escape test needs root (to take QEMU's uid)")
	}
	d := newDaemon(t, "--qemu-uid-range", fmt.Sprintf("%d-%d", qemuFirst, qemuLast))
	d.State = filepath.Join(testenv.PassableTempDir(t), "state")
	d.start()
	img, _ := json.Marshal(testenv.ReachableImage(t))
	id := d.create(`{"image":` + string(img) + `,"accel":"tcg","boot_timeout_ms":300000,"name":"escape"}`)
	pid, c := qemuCreds(t, id)
	if c.uid <= qemuFirst || c.uid > qemuLast || c.gid == 0 {
		t.Fatalf("QEMU pid %d runs as uid %d gid %d, want a uid of its own in %d..%d and not gid 0 (issue 16's confinement is missing)", pid, c.uid, c.gid, qemuFirst+1, qemuLast)
	}

	// The host's files the links point to: root's, in a directory QEMU's
	// user cannot even pass (only root following a link reaches them).
	host := t.TempDir()
	nonce := make([]byte, 16)
	rand.Read(nonce)
	secret := hostFile{filepath.Join(host, "access-key"), "host-secret-" + hex.EncodeToString(nonce) + "\n", 0o600}
	target := hostFile{filepath.Join(host, "target"), "host file\n", 0o644}
	for _, h := range []hostFile{secret, target} {
		if err := os.WriteFile(h.path, []byte(h.content), h.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(h.path, h.mode); err != nil {
			t.Fatal(err)
		}
	}
	checkHost := func(when string) {
		t.Helper()
		secret.check(t, when)
		target.check(t, when)
		if ents, err := os.ReadDir(host); err != nil || len(ents) != 2 {
			t.Errorf("%s: the host dir holds %v (%v), want only its two files", when, ents, err)
		}
	}
	dir := filepath.Join(d.State, "sandboxes", id)
	in := func(name string) string { return filepath.Join(dir, name) }
	checkDir := func(when string) {
		t.Helper()
		fi, err := os.Lstat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != 0 || st.Gid != 0 || fi.Mode().Perm() != 0o711 {
			t.Errorf("%s: the sandbox dir is %d:%d %v, want root's, drwx--x--x", when, st.Uid, st.Gid, fi.Mode())
		}
	}
	checkDir("after the create")

	// (1) The directory is root's: nothing gets in.
	ops := [][3]string{
		{"unlink", in("console.log")},
		{"unlink", in("overlay.qcow2")},
		{"rename", in("overlay.qcow2"), in("overlay.real")},
		{"link", in("overlay.qcow2"), in("overlay.link")},
		{"symlink", secret.path, in("secrets.json")},
		{"symlink", secret.path, in("console.log.1")},
	}
	got := plantAs(t, c, ops)
	for i, op := range ops {
		if got[i] != "EACCES" {
			t.Errorf("as QEMU's uid %d in the root-owned sandbox dir: %s %s: %q, want EACCES", c.uid, op[0], op[1:], got[i])
		}
	}
	checkDir("after the refused plants")

	// The overlay is QEMU's user's to write: its header's backing file
	// name becomes the host secret (qemu-img rebase -u, as that uid, on
	// the stopped sandbox). The start gives libvirt and QEMU the backing
	// file from the domain XML, so the name is never opened: the guest
	// boots on its own disk.
	d.call("POST", "/v1/sandboxes/"+id+"/stop", "", http.StatusOK)
	rebase := exec.Command("qemu-img", "rebase", "-u", "-F", "raw", "-b", secret.path, in("overlay.qcow2"))
	rebase.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.gid, Groups: c.groups}}
	rebase.Dir = "/"
	if out, err := rebase.CombinedOutput(); err != nil {
		t.Fatalf("qemu-img rebase -u as QEMU's uid %d: %v: %s", c.uid, err, out)
	}
	d.call("POST", "/v1/sandboxes/"+id+"/start", "", http.StatusOK)
	if r := d.exec(id, time.Minute, "sh", "-c", "test -x /bin/sh && echo ok"); r.code != 0 || string(r.stdout) != "ok\n" {
		t.Fatalf("exec after the start on a rebased overlay: exit %d %q %s %s", r.code, r.stdout, r.stderr, r.err)
	}
	checkHost("after a start on an overlay whose header names the host secret")
	pid, c = qemuCreds(t, id) // a new QEMU, the same uid

	// (2) The directory as QEMU's user owned it before issue 24.
	if err := os.Chown(dir, int(c.uid), int(c.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	ops = [][3]string{
		{"unlink", in("console.log")},
		{"symlink", secret.path, in("console.log")},
		{"symlink", secret.path, in("secrets.json")},
		{"rename", in("overlay.qcow2"), in("overlay.real")},
		{"symlink", target.path, in("overlay.qcow2")},
	}
	got = plantAs(t, c, ops)
	for i, op := range ops {
		if got[i] != "" {
			t.Fatalf("as QEMU's uid %d in a sandbox dir of its own: %s %s: %q, want success", c.uid, op[0], op[1:], got[i])
		}
	}
	noSecret := func(what string, body []byte) {
		t.Helper()
		if strings.Contains(string(body), strings.TrimSpace(secret.content)) {
			t.Errorf("%s served the host secret: %.500s", what, body)
		}
	}
	apiErr := func(body []byte) (code, msg string) {
		var e struct {
			Error struct{ Code, Message string }
		}
		json.Unmarshal(body, &e)
		return e.Error.Code, e.Error.Message
	}
	body := d.call("GET", "/v1/sandboxes/"+id+"/console", "", http.StatusUnprocessableEntity)
	noSecret("GET console", body)
	if code, msg := apiErr(body); code != "invalid_argument" || !strings.Contains(msg, in("console.log")+" is a symbolic link") {
		t.Errorf("GET console with console.log a symlink: %s %q, want invalid_argument naming the symbolic link", code, msg)
	}
	noSecret("GET the sandbox", d.call("GET", "/v1/sandboxes/"+id, "", http.StatusOK))
	checkHost("after GET console")

	d.call("POST", "/v1/sandboxes/"+id+"/pause", `{"to_disk":true}`, http.StatusOK)
	checkHost("after the pause to disk")
	body = d.call("POST", "/v1/sandboxes/"+id+"/resume", "", http.StatusUnprocessableEntity)
	noSecret("resume", body)
	if code, msg := apiErr(body); code != "snapshot_unusable" || !strings.Contains(msg, in("overlay.qcow2")+" is a symbolic link: refused") {
		t.Errorf("resume with overlay.qcow2 a symlink: %s %q, want snapshot_unusable naming the symbolic link", code, msg)
	}
	checkHost("after the resume")

	body = d.call("POST", "/v1/sandboxes/"+id+"/start", "", http.StatusUnprocessableEntity)
	noSecret("start", body)
	if code, msg := apiErr(body); code != "invalid_argument" || !strings.Contains(msg, in("overlay.qcow2")+" is a symbolic link") {
		t.Errorf("start with overlay.qcow2 a symlink: %s %q, want invalid_argument naming the symbolic link", code, msg)
	}
	checkHost("after the start")
	checkDir("after the start")
	if _, err := os.Lstat(in("console.log")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the planted console.log after the start: %v, want removed", err)
	}
	if body := d.call("GET", "/v1/sandboxes/"+id+"/console", "", http.StatusOK); len(body) != 0 {
		t.Errorf("GET console after the start: %q, want empty (the planted log is gone, no domain wrote one)", body)
	}
	if got := plantAs(t, c, [][3]string{{"symlink", secret.path, in("console.log")}}); got[0] != "EACCES" {
		t.Errorf("as QEMU's uid after the start: symlink console.log: %q, want EACCES (the dir is root's again)", got[0])
	}
	checkHost("at the end")
}
