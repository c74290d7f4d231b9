// Package overlay creates and inspects the per-sandbox qcow2 overlay: a
// copy-on-write image whose backing file is an image's read-only base
// disk, so every sandbox writes only its own differences. It shells out to
// qemu-img (Debian package qemu-utils); see qemu-img(1) and the qcow2
// backing-file documentation in QEMU's docs/interop/qcow2.txt.
package overlay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Format is the image format of overlays and of their backing files.
const Format = "qcow2"

// Options tunes [Create].
type Options struct {
	// SizeBytes is the virtual size of the overlay in bytes. 0 keeps the
	// backing file's virtual size; otherwise it must be at least that
	// size (the guest then sees a larger disk it may grow its filesystem
	// into).
	SizeBytes uint64
	// QemuImg is the qemu-img binary to run; default "qemu-img" from PATH.
	QemuImg string
}

func (o Options) qemuImg() string {
	if o.QemuImg != "" {
		return o.QemuImg
	}
	return "qemu-img"
}

// Create makes a new qcow2 overlay at path backed by the qcow2 image
// backing, running
//
//	qemu-img create -f qcow2 -F qcow2 -b ABS(backing) ABS(path) [SIZE]
//
// Both paths are made absolute first: the overlay records the backing
// path verbatim, and an absolute path stays valid whatever the working
// directory of the QEMU process; it also keeps qemu-img from reading a
// name like "nbd:..." as a protocol. Create never overwrites: if path
// exists the error wraps fs.ErrExist. A missing backing file wraps
// fs.ErrNotExist. On any failure the partly written overlay is removed.
func Create(ctx context.Context, backing, path string, opts Options) (err error) {
	absBacking, err := filepath.Abs(backing)
	if err != nil {
		return fmt.Errorf("overlay: backing file %q: %w", backing, err)
	}
	absPath, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("overlay: path %q: %w", path, err)
	}
	st, err := os.Stat(absBacking)
	if err != nil {
		return fmt.Errorf("overlay: backing file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("overlay: backing file %s is not a regular file", absBacking)
	}
	if opts.SizeBytes > 0 {
		base, err := inspect(ctx, opts.qemuImg(), absBacking)
		if err != nil {
			return fmt.Errorf("overlay: backing file: %w", err)
		}
		if opts.SizeBytes < base.VirtualSize {
			return fmt.Errorf("overlay: size %d bytes is smaller than the backing file's virtual size %d bytes; use 0 or at least %d",
				opts.SizeBytes, base.VirtualSize, base.VirtualSize)
		}
	}

	// Reserve the name atomically so that two creators cannot both
	// succeed; qemu-img then rewrites the empty file.
	f, err := os.OpenFile(absPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("overlay: create %s: %w", absPath, err)
	}
	_ = f.Close()
	defer func() {
		if err != nil {
			if rmErr := os.Remove(absPath); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("overlay: remove partial %s: %w", absPath, rmErr))
			}
		}
	}()

	args := []string{"create", "-q", "-f", Format, "-F", Format, "-b", absBacking, absPath}
	if opts.SizeBytes > 0 {
		args = append(args, strconv.FormatUint(opts.SizeBytes, 10))
	}
	if _, err := run(ctx, opts.qemuImg(), args...); err != nil {
		return fmt.Errorf("overlay: create %s over %s: %w", absPath, absBacking, err)
	}
	return nil
}

// Remove deletes the overlay at path. A missing file is not an error, so
// Remove may be called twice or after a failed Create.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("overlay: remove: %w", err)
	}
	return nil
}

// run executes a command and returns its stdout; a failure includes the
// command's stderr.
func run(ctx context.Context, bin string, args ...string) ([]byte, error) {
	return runAs(ctx, nil, bin, args...)
}

// runAs is run as the user cred names (nil: this process's own; see
// imageUser).
func runAs(ctx context.Context, cred *syscall.Credential, bin string, args ...string) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		cmd.Dir = "/" // this process's may be closed to cred's user
	}
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return nil, fmt.Errorf("%s %s: %w: %s", bin, args[0], err, msg)
		}
		return nil, fmt.Errorf("%s %s: %w", bin, args[0], err)
	}
	return stdout.Bytes(), nil
}
