package overlay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
)

// Info is what qemu-img reports about an image.
type Info struct {
	// Format is the image format, e.g. "qcow2" or "raw".
	Format string
	// VirtualSize is the disk size the guest sees, in bytes.
	VirtualSize uint64
	// ActualSize is the space the file takes on the host, in bytes.
	ActualSize uint64
	// BackingFile is the backing file name as recorded in the image
	// (absolute for overlays made by [Create]); empty without one.
	BackingFile string
	// BackingFormat is the recorded format of the backing file.
	BackingFormat string
}

// imgInfo is the subset of `qemu-img info --output=json` we read (field
// names from QEMU's QAPI ImageInfo type).
type imgInfo struct {
	Format        string `json:"format"`
	VirtualSize   uint64 `json:"virtual-size"`
	ActualSize    uint64 `json:"actual-size"`
	BackingFile   string `json:"backing-filename"`
	BackingFormat string `json:"backing-filename-format"`
}

// Inspect runs `qemu-img info --output=json --force-share` on path (made
// absolute, so that no name is read as a protocol), as the file's owner
// when this process is root and the file is another user's (owner.go).
// With --force-share it also works while a running QEMU holds the image's
// write lock. A missing file wraps fs.ErrNotExist.
func Inspect(ctx context.Context, path string) (Info, error) {
	return inspect(ctx, Options{}.qemuImg(), path)
}

func inspect(ctx context.Context, bin, path string) (Info, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return Info{}, fmt.Errorf("overlay: inspect %q: %w", path, err)
	}
	cred, err := imageUser(abs, true)
	if err != nil {
		return Info{}, fmt.Errorf("overlay: inspect: %w", err)
	}
	out, err := runAs(ctx, cred, bin, "info", "--output=json", "--force-share", abs)
	if err != nil {
		return Info{}, fmt.Errorf("overlay: inspect %s: %w", path, err)
	}
	return parseInfo(out)
}

func parseInfo(out []byte) (Info, error) {
	var v imgInfo
	if err := json.Unmarshal(out, &v); err != nil {
		return Info{}, fmt.Errorf("overlay: decode qemu-img info: %w", err)
	}
	if v.Format == "" {
		return Info{}, fmt.Errorf("overlay: qemu-img info reported no format")
	}
	return Info(v), nil
}
