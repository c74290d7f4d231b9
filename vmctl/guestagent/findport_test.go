package guestagent

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestFindPort(t *testing.T) {
	root := t.TempDir()
	mk := func(dir, name, dev string) {
		d := filepath.Join(root, "sys/class/virtio-ports", dir)
		os.MkdirAll(d, 0o755)
		os.WriteFile(filepath.Join(d, "name"), []byte(name+"\n"), 0o644)
		os.WriteFile(filepath.Join(d, "dev"), []byte(dev+"\n"), 0o644)
	}
	mk("vport1p1", "org.qemu.guest_agent.0", "250:1")
	mk("vport2p3", "org.agentbox.agent.0", "251:3")
	os.MkdirAll(filepath.Join(root, "dev"), 0o755)

	got, err := findPort(root, "org.agentbox.agent.0")
	if want := filepath.Join(root, "dev/vport2p3"); err != nil || got != want {
		t.Fatalf("findPort = %q, %v; want %q", got, err, want)
	}
	var st unix.Stat_t
	if err := unix.Stat(got, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || unix.Major(st.Rdev) != 251 || unix.Minor(st.Rdev) != 3 {
		t.Fatalf("node mode %o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	// Found again without mknod (the node exists now).
	if again, err := findPort(root, "org.agentbox.agent.0"); err != nil || again != got {
		t.Fatalf("second findPort = %q, %v", again, err)
	}
	// udev's symlink directory wins.
	link := filepath.Join(root, "dev/virtio-ports/org.agentbox.agent.0")
	os.MkdirAll(filepath.Dir(link), 0o755)
	os.Symlink("../vport2p3", link)
	if got, err := findPort(root, "org.agentbox.agent.0"); err != nil || got != link {
		t.Fatalf("with udev link: %q, %v", got, err)
	}
	if _, err := findPort(root, "org.nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing port: %v", err)
	}
}
