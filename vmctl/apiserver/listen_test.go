package apiserver

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/tests/testenv"
)

// dialHelperEnv names the variable that makes TestDialHelper dial the
// unix socket it names and print what happened (the helper process
// TestListenUnixOtherUID runs as other uids).
const dialHelperEnv = "AGENTBOX_TEST_DIAL_UNIX"

// TestDialHelper is no test of its own: run with dialHelperEnv set (by
// TestListenUnixOtherUID, as another uid), it dials that socket and
// prints "connected" or the errno that refused it, then exits.
func TestDialHelper(t *testing.T) {
	path := os.Getenv(dialHelperEnv)
	if path == "" {
		return // not the helper process
	}
	c, err := net.Dial("unix", path)
	var errno syscall.Errno
	switch {
	case err == nil:
		c.Close()
		fmt.Print("connected")
	case errors.As(err, &errno):
		fmt.Print(unixErrnoName(errno))
	default:
		fmt.Print(err)
	}
	os.Exit(0)
}

// unixErrnoName names the errnos a dial to a unix socket gets.
func unixErrnoName(e syscall.Errno) string {
	switch e {
	case syscall.EACCES:
		return "EACCES"
	case syscall.ENOENT:
		return "ENOENT"
	case syscall.ECONNREFUSED:
		return "ECONNREFUSED"
	}
	return e.Error()
}

// TestListenUnixPublishesAfterMode: ListenUnix binds in a private 0700
// directory, sets the socket's mode and group there, and only then gives
// it its path; the path is the listener's address, Close removes it, and
// nothing of the private directory is left.
func TestListenUnixPublishesAfterMode(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "a.sock")
	var seen []string
	beforePublish = func(bound string) {
		fi, err := os.Lstat(bound)
		if err != nil {
			t.Errorf("the bound socket: %v", err)
			return
		}
		st := fi.Sys().(*syscall.Stat_t)
		seen = append(seen, fmt.Sprintf("socket %v %v gid %d", fi.Mode().Type(), fi.Mode().Perm(), st.Gid))
		pfi, err := os.Stat(filepath.Dir(bound))
		if err != nil {
			t.Errorf("the private directory: %v", err)
			return
		}
		seen = append(seen, fmt.Sprintf("private dir %v beside the path: %v, named %s*: %v", pfi.Mode().Perm(),
			filepath.Dir(filepath.Dir(bound)) == dir, bindDir, strings.HasPrefix(filepath.Base(filepath.Dir(bound)), bindDir)))
		if _, err := os.Lstat(sock); !errors.Is(err, fs.ErrNotExist) {
			seen = append(seen, fmt.Sprintf("the path exists before its mode is set: %v", err))
		}
	}
	t.Cleanup(func() { beforePublish = nil })
	l, err := ListenUnix(sock, 0o640, os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		fmt.Sprintf("socket %v -rw-r----- gid %d", fs.ModeSocket, os.Getgid()),
		fmt.Sprintf("private dir -rwx------ beside the path: true, named %s*: true", bindDir),
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("before the socket got its path:\n%s\nwant\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the socket at its path: %v %v", fi, err)
	}
	if a := l.Addr(); a.Network() != "unix" || a.String() != sock {
		t.Errorf("Addr = %s %s, want unix %s", a.Network(), a, sock)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Name() != "a.sock" {
		t.Errorf("the socket's directory holds %v, want only a.sock", ents)
	}
	accepted := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatalf("dial the published socket: %v", err)
	}
	c.Close()
	if err := testenv.Receive(t, 30*time.Second, "the accept", accepted); err != nil {
		t.Fatalf("Accept: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("after Close the socket's directory holds %v", ents)
	}
}

// TestListenUnixRefusalLeavesNothing: a path that appears while binding
// (another daemon won the race) is not replaced, a path too long to bind
// is refused, and neither leaves a socket or a private directory.
func TestListenUnixRefusalLeavesNothing(t *testing.T) {
	dir := testenv.ShortTempDir(t)
	sock := filepath.Join(dir, "a.sock")
	beforePublish = func(string) {
		if err := os.WriteFile(sock, []byte("theirs"), 0o600); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { beforePublish = nil })
	_, err := ListenUnix(sock, 0, -1)
	if err == nil || err.Error() != sock+" appeared while binding (another agentbox serve starting?): stop it or pass --socket" {
		t.Fatalf("ListenUnix = %v", err)
	}
	if b, err := os.ReadFile(sock); err != nil || string(b) != "theirs" {
		t.Errorf("the other file: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the socket's directory holds %v, want only the other file", ents)
	}
	beforePublish = nil

	long := filepath.Join(dir, strings.Repeat("x", maxSocketPath-len(dir)))
	if _, err := ListenUnix(long, 0, -1); err == nil || err.Error() != fmt.Sprintf("the socket path %s is 108 bytes long, at most 107: pass a shorter --socket", long) {
		t.Errorf("ListenUnix of a %d-byte path = %v", len(long), err)
	}
	deep := filepath.Join(dir, strings.Repeat("d", maxSocketPath-len(dir)-len("/a.sock")-1))
	if err := os.Mkdir(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := ListenUnix(filepath.Join(deep, "a.sock"), 0, -1); err == nil || !strings.Contains(err.Error(), "is too long: binding it takes") {
		t.Errorf("ListenUnix of a socket in a %d-byte directory = %v", len(deep), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("after the long paths the directory holds %v, want the other file and the deep directory", ents)
	}
	if ents, _ := os.ReadDir(deep); len(ents) != 0 {
		t.Errorf("the deep directory holds %v", ents)
	}
}

// TestListenUnixOtherUID: another uid cannot connect to the socket before
// its mode is set: while ListenUnix binds, its private path refuses
// (EACCES) and its real path does not exist (ENOENT), also for a uid of
// the socket's group; once published, the group's uid connects and a uid
// outside it is refused. Needs root (to run the dialer as other uids).
func TestListenUnixOtherUID(t *testing.T) {
	if os.Getuid() != 0 {
		testenv.SkipOrFail(t, "dialing as other uids needs root")
	}
	const groupUID, groupGID, otherUID = 65534, 65534, 65533
	// The test binary, where the other uids can run it (go test builds
	// in a 0700 directory).
	bin := filepath.Join(testenv.ShortTempDir(t), "dialer")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		err = errors.Join(err, dst.Close())
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	dial := func(uid, gid uint32, path string) string {
		cmd := osexec.Command(bin, "-test.run=^TestDialHelper$")
		cmd.Env = append(os.Environ(), dialHelperEnv+"="+path)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("dialer as uid %d: %v", uid, err)
		}
		return fmt.Sprintf("uid %d: %s", uid, out)
	}
	dir := testenv.ShortTempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	var got []string
	beforePublish = func(bound string) {
		got = append(got, "private "+dial(groupUID, groupGID, bound), "path "+dial(groupUID, groupGID, sock))
	}
	t.Cleanup(func() { beforePublish = nil })
	l, err := ListenUnix(sock, 0o660, groupGID)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	got = append(got, "published "+dial(groupUID, groupGID, sock), "published "+dial(otherUID, otherUID, sock))
	want := []string{
		"private uid 65534: EACCES",
		"path uid 65534: ENOENT",
		"published uid 65534: connected",
		"published uid 65533: EACCES",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("dials:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
