package sandbox

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Files a sandbox's QEMU could have touched (issue 24, docs/security.md).
// A QEMU that a guest took over runs as the sandbox's uid
// (Config.QEMUUsers) and may write what that uid owns: its overlay. It
// must not make the daemon, which is root, read, chown or chmod anything
// else. So the sandbox's directory stays the daemon's (0711, secureDir):
// QEMU's user can open the overlay in it by name but cannot add, remove
// or rename an entry; and every open the daemon makes of a file in it
// (overlay, console log, secrets) goes through OpenSandboxFile, which
// follows no symlink, takes only a regular file with one link (a hard
// link a QEMU made elsewhere, or one planted before the directory was the
// daemon's, has two), and, where the record holds one, only the inode the
// daemon recorded; owner and mode are then changed through that
// descriptor (fchown, fchmod), never by name.

// ErrUnsafeFile: a file in a sandbox's directory is not the one the
// daemon made (a symbolic link, a hard link, a directory, a FIFO, a
// device, another inode than recorded). The message names the path and
// what it is; the daemon refused to open, read, chown or chmod it.
var ErrUnsafeFile = errdefs.New(errdefs.ErrFailedPrecondition, "unsafe_file", "a sandbox file is not the one the daemon made")

// FileID is a file's identity on the host: its device and inode numbers
// (stat's st_dev and st_ino).
type FileID struct {
	Dev uint64 `json:"dev"`
	Ino uint64 `json:"ino"`
}

// OpenSandboxFile opens path, a file in a sandbox's directory that the
// sandbox's QEMU could have written, for flag (os.O_RDONLY, os.O_WRONLY
// or os.O_RDWR; O_CREATE is not honoured): the last element is not
// followed if it is a symbolic link (O_NOFOLLOW; the directories above it
// are the daemon's), a FIFO or device does not block or become a
// controlling terminal, and the open is kept only for a regular file
// with exactly one link and, when want is non-nil, the identity *want.
// It returns the file and its identity. Errors: ErrUnsafeFile (wrapped,
// naming path and what it is); the open's own as an *os.PathError
// (fs.ErrNotExist for a missing file, fs.ErrPermission).
func OpenSandboxFile(path string, flag int, want *FileID) (*os.File, FileID, error) {
	flag &^= os.O_CREATE | os.O_EXCL | os.O_TRUNC
	fd, err := unix.Open(path, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, FileID{}, fmt.Errorf("%w: %s is a symbolic link: refused (a sandbox's QEMU may have planted it)", ErrUnsafeFile, path)
	}
	if err != nil {
		return nil, FileID{}, &os.PathError{Op: "open", Path: path, Err: err}
	}
	id, err := checkSandboxFile(fd, path, want)
	if err != nil {
		unix.Close(fd)
		return nil, FileID{}, err
	}
	// Back to blocking I/O (a regular file ignores O_NONBLOCK, but the
	// descriptor is handed on).
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, FileID{}, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), id, nil
}

// checkSandboxFile is OpenSandboxFile's check of the open fd.
func checkSandboxFile(fd int, path string, want *FileID) (FileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return FileID{}, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	id := FileID{Dev: uint64(st.Dev), Ino: st.Ino}
	if kind := fileKind(st.Mode); kind != "" {
		return id, fmt.Errorf("%w: %s is %s, not a regular file: refused", ErrUnsafeFile, path, kind)
	}
	if st.Nlink != 1 {
		return id, fmt.Errorf("%w: %s has %d hard links, want 1 (a link to a file outside the sandbox?): refused", ErrUnsafeFile, path, st.Nlink)
	}
	if want != nil && id != *want {
		return id, fmt.Errorf("%w: %s is inode %d on device %d, not the inode %d on device %d the daemon recorded: refused", ErrUnsafeFile, path, id.Ino, id.Dev, want.Ino, want.Dev)
	}
	return id, nil
}

// fileKind names a non-regular file type of a stat mode ("" for a
// regular file).
func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("of type %#o", mode&unix.S_IFMT)
}

// giveFile sets the owner and mode of the open file f (fchown, fchmod).
func giveFile(f *os.File, uid, gid int, mode os.FileMode) error {
	if err := f.Chown(uid, gid); err != nil {
		return err
	}
	return f.Chmod(mode)
}

// secureDir makes dir, a sandbox's directory, the daemon's: owned by the
// daemon's uid and gid, mode perm, through a descriptor opened without
// following a symlink. A directory a QEMU user owned (before issue 24) is
// taken back. Errors: ErrUnsafeFile when dir is not a directory; the
// open's, chown's, chmod's.
func secureDir(dir string, perm os.FileMode) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("%w: sandbox directory %s is not a directory: refused", ErrUnsafeFile, dir)
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: dir, Err: err}
	}
	if int(st.Uid) == os.Geteuid() && int(st.Gid) == os.Getegid() && os.FileMode(st.Mode&0o777) == perm {
		return nil
	}
	if err := giveFile(f, os.Geteuid(), os.Getegid(), perm); err != nil {
		return fmt.Errorf("take the sandbox directory %s back from QEMU's user: %w", dir, err)
	}
	return nil
}

// createSandboxFile opens path read-write, creating it with perm if it
// does not exist, with OpenSandboxFile's checks (no symlink followed, a
// regular file with one link).
func createSandboxFile(path string, perm os.FileMode) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, uint32(perm))
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w: %s is a symbolic link: refused", ErrUnsafeFile, path)
	}
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if _, err := checkSandboxFile(fd, path, nil); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// dropPlanted removes path when it is anything but a regular file with
// one link (a symlink, a hard link, a FIFO, a directory … a sandbox's
// QEMU user could have put there while it owned the directory), so that
// what opens it by name next (libvirt's console log) creates a new file
// instead of following it. It returns what it removed ("" for nothing).
// Unlinking follows no symlink. Errors: lstat's (other than not
// existing), remove's.
func dropPlanted(path string) (string, error) {
	var st unix.Stat_t
	err := unix.Lstat(path, &st)
	if errors.Is(err, unix.ENOENT) {
		return "", nil
	}
	if err != nil {
		return "", &os.PathError{Op: "lstat", Path: path, Err: err}
	}
	kind := fileKind(st.Mode)
	if kind == "" && st.Nlink == 1 {
		return "", nil
	}
	if kind == "" {
		kind = fmt.Sprintf("a file of %d hard links", st.Nlink)
	}
	if err := os.RemoveAll(path); err != nil {
		return "", fmt.Errorf("remove %s (%s, planted by a sandbox's QEMU?): %w", path, kind, err)
	}
	return kind, nil
}
