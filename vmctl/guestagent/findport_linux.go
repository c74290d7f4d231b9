package guestagent

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FindPort returns the device path of the virtio-serial port named name
// (the name of the <channel> target in the domain XML, e.g.
// "org.agentbox.agent.0"): /dev/virtio-ports/NAME when udev created it,
// otherwise /dev/vportNpM found by scanning /sys/class/virtio-ports/*/name.
// When /dev lacks the vportNpM node it is created with mknod from the
// major:minor in sysfs. The error wraps fs.ErrNotExist when no port has
// that name.
func FindPort(name string) (string, error) {
	return findPort("/", name)
}

// findPort is FindPort below root (for tests).
func findPort(root, name string) (string, error) {
	link := filepath.Join(root, "dev/virtio-ports", name)
	if _, err := os.Stat(link); err == nil {
		return link, nil
	}
	names, _ := filepath.Glob(filepath.Join(root, "sys/class/virtio-ports/vport*/name"))
	for _, nf := range names {
		b, err := os.ReadFile(nf)
		if err != nil || strings.TrimSpace(string(b)) != name {
			continue
		}
		sysdir := filepath.Dir(nf)
		dev := filepath.Join(root, "dev", filepath.Base(sysdir))
		if _, err := os.Stat(dev); err == nil {
			return dev, nil
		}
		if err := mknodFromSysfs(filepath.Join(sysdir, "dev"), dev); err != nil {
			return "", fmt.Errorf("guestagent: port %q: %w", name, err)
		}
		return dev, nil
	}
	return "", fmt.Errorf("guestagent: virtio port %q: %w", name, fs.ErrNotExist)
}

// mknodFromSysfs creates character device dev (mode 0600) with the
// "MAJOR:MINOR" read from devFile.
func mknodFromSysfs(devFile, dev string) error {
	b, err := os.ReadFile(devFile)
	if err != nil {
		return err
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	major, err1 := strconv.ParseUint(maj, 10, 32)
	minor, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("bad device number %q in %s", b, devFile)
	}
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(major), uint32(minor)))); err != nil {
		return fmt.Errorf("mknod %s: %w", dev, err)
	}
	return nil
}

// OpenPort finds the port named name with FindPort and opens it for
// reading and writing. Open it once and keep it for the agent's lifetime:
// a virtio-serial port admits a single opener.
func OpenPort(name string) (*os.File, error) {
	p, err := FindPort(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("guestagent: open port: %w", err)
	}
	return f, nil
}
