package sandbox

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// TestOpenSandboxFile: a regular file of one link opens (with its
// identity); a symlink, a hard link, a FIFO, a directory and another
// inode than the one recorded are refused with ErrUnsafeFile, and the
// file they lead to is not touched; a missing file is fs.ErrNotExist.
func TestOpenSandboxFile(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(outside, []byte("host secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "console.log")
	if err := os.WriteFile(good, []byte("boot\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, id, err := OpenSandboxFile(good, os.O_RDONLY, nil)
	if err != nil {
		t.Fatalf("regular file: %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(good, &st); err != nil {
		t.Fatal(err)
	}
	if id != (FileID{Dev: uint64(st.Dev), Ino: st.Ino}) {
		t.Errorf("identity %+v, want dev %d ino %d", id, st.Dev, st.Ino)
	}
	b := make([]byte, 16)
	if n, err := f.Read(b); err != nil || string(b[:n]) != "boot\n" {
		t.Errorf("read %q, %v; want %q", b[:n], err, "boot\n")
	}
	f.Close()
	if f, _, err := OpenSandboxFile(good, os.O_RDONLY, &id); err != nil {
		t.Errorf("the recorded inode: %v", err)
	} else {
		f.Close()
	}

	symlink := filepath.Join(dir, "symlink")
	hardlink := filepath.Join(dir, "hardlink")
	fifo := filepath.Join(dir, "fifo")
	subdir := filepath.Join(dir, "subdir")
	if err := os.Symlink(outside, symlink); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, hardlink); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	other := FileID{Dev: id.Dev, Ino: id.Ino + 1}
	for _, c := range []struct {
		name, path string
		flag       int
		want       *FileID
		says       string
	}{
		{"symlink", symlink, os.O_RDWR, nil, symlink + " is a symbolic link"},
		{"hard link", hardlink, os.O_RDWR, nil, hardlink + " has 2 hard links, want 1"},
		{"FIFO", fifo, os.O_RDONLY, nil, fifo + " is a FIFO, not a regular file"},
		{"directory", subdir, os.O_RDONLY, nil, subdir + " is a directory, not a regular file"},
		{"another inode", good, os.O_RDONLY, &other, good + " is inode "},
	} {
		f, _, err := OpenSandboxFile(c.path, c.flag, c.want)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened, want ErrUnsafeFile", c.name)
			continue
		}
		if !errors.Is(err, ErrUnsafeFile) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want ErrUnsafeFile saying %q", c.name, err, c.says)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != "host secret\n" {
		t.Errorf("the outside file: %q, %v; want it unchanged", b, err)
	}
	if _, _, err := OpenSandboxFile(filepath.Join(dir, "missing"), os.O_RDONLY, nil); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUnsafeFile) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	if got := ConsoleTail(symlink, 20); got != "" {
		t.Errorf("ConsoleTail of a symlink to a host file = %q, want \"\"", got)
	}
}

// TestSecureDir: a sandbox directory a QEMU user owned (before issue 24)
// is taken back, mode 0711; a symlink in its place is refused and its
// target keeps its owner and mode.
func TestSecureDir(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "secureDir chowns: needs root")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "sb")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 302999, 302999); err != nil {
		t.Fatal(err)
	}
	if err := secureDir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 0 || st.Gid != 0 || fi.Mode().Perm() != 0o711 {
		t.Errorf("after secureDir: uid %d gid %d mode %04o, want 0 0 0711", st.Uid, st.Gid, fi.Mode().Perm())
	}

	target := filepath.Join(root, "target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(target, 302998, 302998); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(root, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := secureDir(link, 0o711); !errors.Is(err, ErrUnsafeFile) {
		t.Errorf("secureDir of a symlink: %v, want ErrUnsafeFile", err)
	}
	fi, err = os.Stat(target)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 302998 || fi.Mode().Perm() != 0o700 {
		t.Errorf("the symlink's target: uid %d mode %04o, want 302998 0700 (unchanged)", st.Uid, fi.Mode().Perm())
	}
}
