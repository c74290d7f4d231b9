package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// mount is one file system init sets up.
type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	mode                   os.FileMode
}

var initMounts = []mount{
	{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
	{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "", 0o555},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "mode=0620,ptmxmode=0666", 0o755},
	{"tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
	{"tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=1777", 0o1777},
	{"tmpfs", "/run", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV, "mode=0755", 0o755},
}

// setupInit prepares a minimal system for PID 1: file systems, PATH, lo.
// It does as much as it can and returns the joined errors.
func setupInit(log *slog.Logger) error {
	var errs []error
	for _, m := range initMounts {
		if err := os.MkdirAll(m.target, m.mode); err != nil {
			errs = append(errs, err)
			continue
		}
		if isMountpoint(m.target) {
			continue // already mounted (the initramfs moves /dev, /proc and /sys over)
		}
		err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
		if errors.Is(err, unix.EBUSY) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err))
		}
	}
	// Symlinks udev would create.
	for link, target := range map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
		"/dev/ptmx": "pts/ptmx",
	} {
		if _, err := os.Lstat(link); err != nil {
			_ = os.Symlink(target, link)
		}
	}
	os.Setenv("PATH", agentproto.DefaultPath)
	os.Setenv("HOME", "/root")
	if err := linkUp("lo"); err != nil {
		errs = append(errs, fmt.Errorf("bring lo up: %w", err))
	}
	err := errors.Join(errs...)
	log.Info("init ready", "err", err)
	return err
}

// setHostname sets the kernel host name.
func setHostname(log *slog.Logger, name string) {
	if err := unix.Sethostname([]byte(name)); err != nil {
		log.Warn("cannot set hostname", "hostname", name, "err", err)
	}
}

// linkUp sets IFF_UP on interface name with SIOCGIFFLAGS/SIOCSIFFLAGS.
func linkUp(name string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS: %w", err)
	}
	return nil
}

// powerOff stops the guest as an init does: TERM then KILL to every
// process, sync, unmount what it can (deepest first) and remount / read
// only, sync, then reboot(2) with POWER_OFF or RESTART. It does not return.
func powerOff(log *slog.Logger, reboot bool) {
	log.Info("shutting down", "reboot", reboot)
	unix.Sync()
	_ = syscall.Kill(-1, syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond) // grace for commands to exit
	_ = syscall.Kill(-1, syscall.SIGKILL)
	unix.Sync()
	targets := mountTargets()
	sort.Sort(sort.Reverse(sort.StringSlice(targets)))
	for _, t := range targets {
		if t == "/" {
			continue
		}
		if err := unix.Unmount(t, 0); err != nil {
			_ = unix.Mount("", t, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
		}
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		log.Warn("cannot remount / read-only", "err", err)
	}
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if reboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	err := unix.Reboot(cmd)
	log.Error("reboot(2) failed", "err", err)
	for {
		time.Sleep(time.Hour) // PID 1 must not exit
	}
}

// mountTargets lists mount points from /proc/self/mounts.
func mountTargets() []string {
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) > 1 {
			out = append(out, fields[1])
		}
	}
	return out
}

// isMountpoint reports whether dir is the root of a mounted file system:
// its device differs from its parent's. (proc and sysfs stack instead of
// failing with EBUSY when mounted twice, so init must look first.)
func isMountpoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(dir+"/..", &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
