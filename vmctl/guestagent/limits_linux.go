package guestagent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The guest side of agentbox's resource limits: the root file system is
// grown to the disk the host gave (GrowRootFS), and commands run in a
// cgroup of their own whose pids.max and memory.max leave headroom for the
// agent, so a fork bomb or a memory hog inside the guest cannot make the
// agent unresponsive (SetupCommandCgroup). The host enforces the sandbox's
// limits regardless; these keep the guest manageable under them.

// ext4IocResizeFS is EXT4_IOC_RESIZE_FS, _IOW('f', 16, __u64): grow a
// mounted ext4 file system to the given number of blocks
// (https://docs.kernel.org/filesystems/ext4/ — online resize; the ioctl
// resize2fs uses).
const ext4IocResizeFS = 0x40086610

// GrowRootFS grows the ext4 file system mounted at / to the size of its
// block device when the device is larger (the host made the disk bigger
// than the image's file system), online, with EXT4_IOC_RESIZE_FS. It
// returns the old and new sizes in bytes (equal when nothing was done).
// Other file systems and devices it cannot find are left alone with an
// error saying why.
func GrowRootFS() (oldBytes, newBytes int64, err error) {
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return 0, 0, fmt.Errorf("stat /: %w", err)
	}
	sysdir := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sectors, err := readSysInt(filepath.Join(sysdir, "size"))
	if err != nil {
		return 0, 0, fmt.Errorf("root device size: %w", err)
	}
	devBytes := sectors * 512
	devName := ""
	if b, err := os.ReadFile(filepath.Join(sysdir, "uevent")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "DEVNAME="); ok {
				devName = "/dev/" + v
			}
		}
	}
	if devName == "" {
		return 0, 0, fmt.Errorf("no device node for %s", sysdir)
	}
	blocks, blockSize, err := ext4Size(devName)
	if err != nil {
		return 0, 0, err
	}
	oldBytes = int64(blocks * blockSize)
	want := uint64(devBytes) / blockSize
	if want <= blocks {
		return oldBytes, oldBytes, nil
	}
	root, err := os.Open("/")
	if err != nil {
		return oldBytes, oldBytes, err
	}
	defer root.Close()
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, root.Fd(), ext4IocResizeFS, uintptr(unsafe.Pointer(&want))); errno != 0 {
		return oldBytes, oldBytes, fmt.Errorf("EXT4_IOC_RESIZE_FS to %d blocks: %w", want, errno)
	}
	return oldBytes, int64(want * blockSize), nil
}

// ext4Size reads the block count and block size from the ext4 superblock
// of dev (at byte 1024; field offsets from the kernel's struct
// ext4_super_block).
func ext4Size(dev string) (blocks, blockSize uint64, err error) {
	f, err := os.Open(dev)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return 0, 0, fmt.Errorf("read superblock of %s: %w", dev, err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return 0, 0, fmt.Errorf("%s holds no ext2/3/4 file system", dev)
	}
	blocks = uint64(binary.LittleEndian.Uint32(sb[0x4:]))
	if binary.LittleEndian.Uint32(sb[0x60:])&0x80 != 0 { // INCOMPAT_64BIT
		blocks |= uint64(binary.LittleEndian.Uint32(sb[0x150:])) << 32
	}
	blockSize = 1024 << binary.LittleEndian.Uint32(sb[0x18:])
	return blocks, blockSize, nil
}

func readSysInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// CommandCgroup is where the agent starts commands: a cgroup v2 group
// below the root, created by SetupCommandCgroup.
const CommandCgroup = "/sys/fs/cgroup/agentbox.commands"

// commandCgroupFD is an open directory fd of CommandCgroup, or -1:
// commands are cloned straight into it (CLONE_INTO_CGROUP), so no child
// escapes it by forking before being moved.
var commandCgroupFD atomic.Int64

func init() { commandCgroupFD.Store(-1) }

// CommandLimits are the limits SetupCommandCgroup applied.
type CommandLimits struct {
	// MemoryMaxBytes is the group's memory.max in bytes, 0 for none
	// ("max": the guest has too little memory for a useful cap, see
	// MinCommandMemoryBytes); Pids its pids.max.
	MemoryMaxBytes int64
	Pids           int64
}

// MinCommandMemoryBytes is the smallest memory.max the agent puts on its
// commands' cgroup (64 MiB). A guest whose MemTotal leaves less after the
// agent's headroom (booted with less RAM than the host's minimum, e.g. an
// old template or a hand-made domain) runs its commands without a memory
// cap rather than with an absurd one: a guest of 100 MiB got 580 KiB, and
// every command thrashed in reclaim forever.
const MinCommandMemoryBytes = 64 << 20

// commandLimits computes the commands' cgroup limits from the guest's
// MemTotal in bytes (see SetupCommandCgroup).
func commandLimits(memTotal int64) CommandLimits {
	l := CommandLimits{
		MemoryMaxBytes: memTotal - max(64<<20, memTotal/8),
		Pids:           min(max(2*(memTotal>>20), 256), 32768),
	}
	if l.MemoryMaxBytes < MinCommandMemoryBytes {
		l.MemoryMaxBytes = 0
	}
	return l
}

// SetupCommandCgroup mounts cgroup2 on /sys/fs/cgroup (if nothing is
// mounted there), enables the cpu, memory and pids controllers for the
// root's children and makes CommandCgroup with
//
//   - memory.max = MemTotal − max(64 MiB, MemTotal/8): a memory hog is
//     OOM-killed inside the group while the agent (in the root group,
//     oom_score_adj −1000) keeps the headroom for its own pages; no cap
//     ("max") when that is below MinCommandMemoryBytes;
//   - pids.max = 2 per MiB of MemTotal, within 256..32768: a fork bomb
//     hits EAGAIN before its tasks' kernel memory fills the guest;
//   - cpu.weight 100 (the default) as one group: the agent's threads in
//     the root compete with the whole group, not with each of its tasks.
//
// Only for the agent as PID 1 (it owns the whole hierarchy). Commands
// started afterwards are cloned into the group.
func SetupCommandCgroup() (CommandLimits, error) {
	const root = "/sys/fs/cgroup"
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err != nil || sfs.Type != unix.CGROUP2_SUPER_MAGIC {
		if err := os.MkdirAll(root, 0o755); err != nil {
			return CommandLimits{}, err
		}
		if err := unix.Mount("cgroup2", root, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return CommandLimits{}, fmt.Errorf("mount cgroup2 on %s: %w", root, err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+cpu +memory +pids"), 0); err != nil {
		return CommandLimits{}, fmt.Errorf("enable cpu, memory and pids controllers: %w", err)
	}
	if err := os.Mkdir(CommandCgroup, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return CommandLimits{}, err
	}
	memTotal, err := memTotalBytes()
	if err != nil {
		return CommandLimits{}, err
	}
	l := commandLimits(memTotal)
	mem := "max"
	if l.MemoryMaxBytes > 0 {
		mem = strconv.FormatInt(l.MemoryMaxBytes, 10)
	}
	for file, v := range map[string]string{"memory.max": mem, "pids.max": strconv.FormatInt(l.Pids, 10)} {
		if err := os.WriteFile(filepath.Join(CommandCgroup, file), []byte(v), 0); err != nil {
			return CommandLimits{}, fmt.Errorf("set %s: %w", file, err)
		}
	}
	// No swap escape where a swap device exists.
	_ = os.WriteFile(filepath.Join(CommandCgroup, "memory.swap.max"), []byte("0"), 0)
	fd, err := unix.Open(CommandCgroup, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return CommandLimits{}, err
	}
	commandCgroupFD.Store(int64(fd))
	return l, nil
}

// useCommandCgroup makes a command start inside CommandCgroup, when it
// exists.
func useCommandCgroup(sys *syscall.SysProcAttr) {
	if fd := commandCgroupFD.Load(); fd >= 0 {
		sys.UseCgroupFD, sys.CgroupFD = true, int(fd)
	}
}

// memTotalBytes reads MemTotal from /proc/meminfo.
func memTotalBytes() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemTotal %q: %w", v, err)
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no MemTotal in /proc/meminfo")
}

// SetupLimits is what the agent does at start for agentbox's resource
// limits: grow the root file system to its disk, and (as PID 1) put
// commands in their own cgroup. Failures are logged, not fatal: the host
// enforces the sandbox's limits regardless.
func SetupLimits(log *slog.Logger, init bool) {
	if oldB, newB, err := GrowRootFS(); err != nil {
		log.Warn("root file system not grown to its disk", "err", err)
	} else if newB > oldB {
		log.Info("root file system grown to its disk", "old_bytes", oldB, "new_bytes", newB)
	}
	if !init {
		return
	}
	if l, err := SetupCommandCgroup(); err != nil {
		log.Warn("commands run without a cgroup of their own: a fork bomb or memory hog may slow the agent", "err", err)
	} else if l.MemoryMaxBytes == 0 {
		log.Warn("commands cgroup without a memory cap: the guest has too little memory to leave the agent its headroom (give it at least 256 MiB)",
			"min_cap_bytes", MinCommandMemoryBytes, "pids_max", l.Pids)
	} else {
		log.Info("commands cgroup ready", "memory_max_bytes", l.MemoryMaxBytes, "pids_max", l.Pids)
	}
}
