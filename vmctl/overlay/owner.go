package overlay

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// An overlay is written by its sandbox's QEMU, which a guest may have
// taken over (issue 24): its qcow2 header, and so the names in it, are
// the guest's. qemu-img, run by the daemon as root, must not open what
// those names say. Two rules keep it from that:
//
//   - qemu-img runs as the image file's owner whenever this process is
//     root and the file is another user's (imageUser): a sandbox's overlay
//     belongs to its QEMU user (vmctl/sandbox confine), so it is parsed
//     with that user's rights only, which reach no other sandbox's files
//     and no host secret.
//   - an image whose header asks for an external data file is refused
//     before `qemu-img snapshot` runs (checkNoDataFile): that command
//     opens the data file the header names read-write (QEMU 7.2, seen with
//     strace; `qemu-img info` opens neither it nor the backing file),
//     and agentbox never makes such an image.
//
// A backing file named in the header is not opened by either command
// (both open the image without its backing chain).

// ErrExternalDataFile is wrapped by [DeleteSnapshotOffline] for a qcow2
// image whose header names an external data file: not an image agentbox
// made (a guest's QEMU may have rewritten it), so qemu-img is not run.
var ErrExternalDataFile = errdefs.New(errdefs.ErrFailedPrecondition, "", "overlay: the image names an external data file")

// imageUser returns the credential qemu-img runs as on the image at path:
// nil (this process's own) unless this process is root and the file is
// another user's; then that user's uid and gid, without supplementary
// groups. With follow false, path must not be a symbolic link (an
// overlay or snapshot file, which agentbox always makes as a regular
// file). Errors: stat's (fs.ErrNotExist for a missing file); a symlink
// with follow false.
func imageUser(path string, follow bool) (*syscall.Credential, error) {
	stat := os.Lstat
	if follow {
		stat = os.Stat
	}
	fi, err := stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link: refused (a sandbox's QEMU may have planted it)", path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 || st.Uid == 0 {
		return nil, nil
	}
	return &syscall.Credential{Uid: st.Uid, Gid: st.Gid, Groups: []uint32{}}, nil
}

// qcow2 header fields (QEMU docs/interop/qcow2.txt): the magic, the
// version, and in version 3 the incompatible feature bits, of which bit 2
// is "external data file".
const (
	qcow2Magic        = "QFI\xfb"
	qcow2IncompatOff  = 72
	qcow2ExternalData = 1 << 2
)

// checkNoDataFile refuses a qcow2 image at path whose header sets the
// external data file bit (ErrExternalDataFile). A file too short for the
// field, or not qcow2, passes: qemu-img says what is wrong with it.
func checkNoDataFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var h [qcow2IncompatOff + 8]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return nil
	}
	if string(h[:4]) != qcow2Magic || binary.BigEndian.Uint32(h[4:8]) < 3 {
		return nil
	}
	if binary.BigEndian.Uint64(h[qcow2IncompatOff:])&qcow2ExternalData != 0 {
		return fmt.Errorf("%w: %s: agentbox never makes one (a guest's QEMU may have rewritten the header); qemu-img not run", ErrExternalDataFile, path)
	}
	return nil
}
