package overlay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// cloneFile is the reflink attempt of [Copy]; a variable so that tests can
// see it is tried and make it fail.
var cloneFile = func(dst, src *os.File) error {
	return unix.IoctlFileClone(int(dst.Fd()), int(src.Fd()))
}

// copyChunk is the most copy_file_range moves per call (bytes).
const copyChunk = 64 << 20

// Copy copies the image at src to dst, which must not exist (the error
// then wraps fs.ErrExist), for restoring a snapshot into a new sandbox.
// It first tries a reflink (FICLONE: btrfs, XFS with reflink=1, bcachefs),
// which shares the data blocks and takes constant time; elsewhere (ext4,
// tmpfs) it copies only the data regions (SEEK_DATA/SEEK_HOLE, then
// copy_file_range), so holes stay holes and the copy takes no more space
// than the source. The data goes into a temporary file next to dst, is
// fsynced, renamed to dst, and the directory is fsynced; on any error
// nothing is left at dst or in the temporary file. The source must not be
// written meanwhile (a running domain's overlay: pause it or copy after
// it stopped).
func Copy(ctx context.Context, src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("overlay: copy: %s is not a regular file", src)
	}
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("overlay: copy to %s: %w", dst, fs.ErrExist)
	}
	dir := filepath.Dir(dst)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			if rmErr := os.Remove(tmp.Name()); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
				err = errors.Join(err, fmt.Errorf("overlay: remove temporary %s: %w", tmp.Name(), rmErr))
			}
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	if cerr := cloneFile(tmp, in); cerr != nil {
		if err := sparseCopy(ctx, tmp, in, st.Size()); err != nil {
			return fmt.Errorf("overlay: copy %s to %s: %w", src, dst, err)
		}
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("overlay: copy: fsync %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("overlay: copy: %w", err)
	}
	// Link rather than rename: a dst created meanwhile is never replaced.
	if err := os.Link(tmp.Name(), dst); err != nil {
		return fmt.Errorf("overlay: copy to %s: %w", dst, err)
	}
	if err := os.Remove(tmp.Name()); err != nil {
		_ = os.Remove(dst)
		return fmt.Errorf("overlay: copy: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// sparseCopy copies the data regions of in (size bytes) to out and sets
// out's size, leaving holes where in has them.
func sparseCopy(ctx context.Context, out, in *os.File, size int64) error {
	if err := out.Truncate(size); err != nil {
		return err
	}
	ifd := int(in.Fd())
	var off int64
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		data, err := unix.Seek(ifd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return nil // only a hole is left
		}
		if err != nil {
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return plainCopy(ctx, out, in, off, size)
			}
			return fmt.Errorf("seek data at %d: %w", off, err)
		}
		hole, err := unix.Seek(ifd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole at %d: %w", data, err)
		}
		hole = min(hole, size)
		if err := copyRange(ctx, out, in, data, hole); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// copyRange copies bytes [from, to) of in to the same offsets of out with
// copy_file_range, falling back to read/write where it is unsupported.
func copyRange(ctx context.Context, out, in *os.File, from, to int64) error {
	for from < to {
		if err := ctx.Err(); err != nil {
			return err
		}
		roff, woff := from, from
		n, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(to-from, copyChunk)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				return plainCopy(ctx, out, in, from, to)
			}
			return fmt.Errorf("copy_file_range at %d: %w", from, err)
		}
		if n == 0 {
			return fmt.Errorf("copy_file_range at %d: source ended early (was it truncated?)", from)
		}
		from += int64(n)
	}
	return nil
}

// plainCopy copies bytes [from, to) with pread/pwrite.
func plainCopy(ctx context.Context, out, in *os.File, from, to int64) error {
	buf := make([]byte, 1<<20)
	for from < to {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := in.ReadAt(buf[:min(int64(len(buf)), to-from)], from)
		if n > 0 {
			if _, werr := out.WriteAt(buf[:n], from); werr != nil {
				return werr
			}
			from += int64(n)
		}
		if err == io.EOF && from < to {
			return fmt.Errorf("read at %d: source ended early (was it truncated?)", from)
		}
		if err != nil && err != io.EOF {
			return err
		}
	}
	return nil
}
