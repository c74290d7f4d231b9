package overlay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrNoSnapshot is wrapped by [DeleteSnapshotOffline] when the image holds
// no snapshot with the tag.
var ErrNoSnapshot = errdefs.New(errdefs.ErrNotFound, "", "overlay: no such snapshot")

// Snapshot is one internal snapshot of a qcow2 image, as listed by
// `qemu-img info --output=json` (QAPI SnapshotInfo).
type Snapshot struct {
	// ID is the image's numeric snapshot id ("1", "2", ...).
	ID string
	// Tag is the snapshot's name, given when it was saved.
	Tag string
	// VMStateSize is the size of the saved memory and device state in
	// bytes; 0 for a disk-only snapshot.
	VMStateSize uint64
	// Date is the host's wall-clock time of the save.
	Date time.Time
	// VMClock is how long the guest had run when it was saved.
	VMClock time.Duration
}

// snapshotInfo is QAPI SnapshotInfo.
type snapshotInfo struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	VMStateSize uint64 `json:"vm-state-size"`
	DateSec     int64  `json:"date-sec"`
	DateNsec    int64  `json:"date-nsec"`
	VMClockSec  int64  `json:"vm-clock-sec"`
	VMClockNsec int64  `json:"vm-clock-nsec"`
}

// Snapshots lists the internal snapshots of the qcow2 image at path,
// oldest first, with `qemu-img info --output=json --force-share` (which
// also works while a running QEMU holds the image), run as the file's
// owner when this process is root and the file is another user's (a
// sandbox's overlay: its QEMU user's; owner.go). An image without
// snapshots yields an empty list. Errors: a missing file wraps
// fs.ErrNotExist; a file that is not a readable qcow2 image (truncated,
// garbage, another format) says so with qemu-img's message.
func Snapshots(ctx context.Context, path string) ([]Snapshot, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("overlay: snapshots of %q: %w", path, err)
	}
	cred, err := imageUser(abs, false)
	if err != nil {
		return nil, fmt.Errorf("overlay: snapshots: %w", err)
	}
	out, err := runAs(ctx, cred, Options{}.qemuImg(), "info", "--output=json", "--force-share", "-f", Format, abs)
	if err != nil {
		return nil, fmt.Errorf("overlay: snapshots of %s: not a readable %s image: %w", abs, Format, err)
	}
	return parseSnapshots(out)
}

func parseSnapshots(out []byte) ([]Snapshot, error) {
	var v struct {
		Format    string         `json:"format"`
		Snapshots []snapshotInfo `json:"snapshots"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		return nil, fmt.Errorf("overlay: decode qemu-img info: %w", err)
	}
	if v.Format != Format {
		return nil, fmt.Errorf("overlay: image format is %q, want %s", v.Format, Format)
	}
	list := make([]Snapshot, 0, len(v.Snapshots))
	for _, s := range v.Snapshots {
		list = append(list, Snapshot{
			ID:          s.ID,
			Tag:         s.Name,
			VMStateSize: s.VMStateSize,
			Date:        time.Unix(s.DateSec, s.DateNsec),
			VMClock:     time.Duration(s.VMClockSec)*time.Second + time.Duration(s.VMClockNsec),
		})
	}
	return list, nil
}

// DeleteSnapshotOffline removes the internal snapshot tag from the qcow2
// image at path, which no QEMU may have open (an overlay of a removed or
// stopped sandbox; for a running domain use the driver's DeleteSnapshot),
// with `qemu-img snapshot -d`. The tag is matched by name only (qemu-img
// itself would also match a snapshot id). qemu-img runs as Snapshots's
// does, and not at all for an image whose header names an external data
// file (owner.go). Errors wrap [ErrNoSnapshot] when the image has no such
// snapshot, [ErrExternalDataFile], fs.ErrNotExist for a missing file;
// qemu-img fails with "Failed to get ... lock" while a QEMU holds the image.
func DeleteSnapshotOffline(ctx context.Context, path, tag string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("overlay: delete snapshot of %q: %w", path, err)
	}
	list, err := Snapshots(ctx, abs)
	if err != nil {
		return err
	}
	if err := checkNoDataFile(abs); err != nil {
		return fmt.Errorf("overlay: delete snapshot %q: %w", tag, err)
	}
	found := false
	for _, s := range list {
		if s.ID == tag && s.Tag != tag {
			// qemu-img -d tries ids before names.
			return fmt.Errorf("overlay: delete snapshot %q of %s: the tag equals the id of snapshot %q; delete by another tool", tag, abs, s.Tag)
		}
		found = found || s.Tag == tag
	}
	if !found || tag == "" {
		return fmt.Errorf("overlay: delete snapshot %q of %s: %w", tag, abs, ErrNoSnapshot)
	}
	cred, err := imageUser(abs, false)
	if err != nil {
		return fmt.Errorf("overlay: delete snapshot: %w", err)
	}
	if _, err := runAs(ctx, cred, Options{}.qemuImg(), "snapshot", "-q", "-d", tag, abs); err != nil {
		return fmt.Errorf("overlay: delete snapshot %q of %s: %w", tag, abs, err)
	}
	return nil
}
