package image

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Image is a loaded, validated image directory. Paths are absolute.
type Image struct {
	// Dir is the absolute image directory.
	Dir string
	// Manifest is the parsed manifest.
	Manifest Manifest
	// Kernel, Initrd and Disk are absolute paths of the image's files.
	Kernel, Initrd, Disk string
	// Digest is the hex sha256 of manifest.toml. Because the manifest holds
	// the sha256 of every file, it identifies the whole image.
	Digest string
}

// LoadOptions tune Load.
type LoadOptions struct {
	// VerifyCacheDir, when set, is a directory where Load remembers files it
	// has already hashed, keyed by (device, inode, size, mtime): a file whose
	// identity is unchanged is not hashed again. This keeps a 300 MiB base
	// disk from costing ~1 s on every start. Empty disables the cache, and
	// every file is hashed on every Load.
	VerifyCacheDir string
}

// Load reads dir/manifest.toml, checks that every file it names exists, is a
// regular file and has the recorded sha256, and that the disk is a standalone
// qcow2 (no backing file of its own). Errors wrap ErrInvalid (or the
// underlying fs error for an unreadable directory) and name the file.
func Load(ctx context.Context, dir string, opts LoadOptions) (*Image, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", dir, err)
	}
	if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is a file: pass the image directory (the one holding %s), e.g. %s", ErrInvalid, abs, ManifestName, filepath.Dir(abs))
	}
	data, err := os.ReadFile(filepath.Join(abs, ManifestName))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s has no %s: pass the image directory that `make test-image` printed (its last line)", ErrInvalid, abs, ManifestName)
		}
		return nil, fmt.Errorf("image %s: %w", abs, err)
	}
	m, err := ParseManifest(data)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", abs, err)
	}
	sum := sha256.Sum256(data)
	img := &Image{
		Dir:      abs,
		Manifest: m,
		Kernel:   filepath.Join(abs, m.Kernel),
		Initrd:   filepath.Join(abs, m.Initrd),
		Disk:     filepath.Join(abs, m.Disk),
		Digest:   hex.EncodeToString(sum[:]),
	}
	cache := newVerifyCache(opts.VerifyCacheDir)
	for _, name := range []string{m.Kernel, m.Initrd, m.Disk} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := cache.verify(filepath.Join(abs, name), m.SHA256[name]); err != nil {
			return nil, fmt.Errorf("image %s: %w", abs, err)
		}
	}
	if err := checkQcow2(img.Disk); err != nil {
		return nil, fmt.Errorf("image %s: %w", abs, err)
	}
	return img, nil
}

// HashFile returns the lowercase hex SHA-256 of the file at path, the form
// of the manifest's [sha256] entries.
func HashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// qcow2Magic is "QFI\xfb", the first four bytes of every qcow2 file
// (QEMU docs/interop/qcow2.txt, "Header").
var qcow2Magic = []byte{'Q', 'F', 'I', 0xfb}

// checkQcow2 verifies the qcow2 magic and version, and that the header's
// backing_file_offset (bytes 8..15) is zero: a base disk must be standalone so
// that an overlay's backing chain is exactly one file deep.
func checkQcow2(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: disk: %v", ErrInvalid, err)
	}
	defer f.Close()
	hdr := make([]byte, 16)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return fmt.Errorf("%w: disk %s is not qcow2 (too short): convert it with `qemu-img convert -O qcow2`", ErrInvalid, filepath.Base(path))
	}
	if string(hdr[:4]) != string(qcow2Magic) {
		return fmt.Errorf("%w: disk %s is not qcow2 (no QFI\\xfb magic): convert it with `qemu-img convert -O qcow2`", ErrInvalid, filepath.Base(path))
	}
	if v := binary.BigEndian.Uint32(hdr[4:8]); v != 2 && v != 3 {
		return fmt.Errorf("%w: disk %s has qcow2 version %d, want 2 or 3", ErrInvalid, filepath.Base(path), v)
	}
	if off := binary.BigEndian.Uint64(hdr[8:16]); off != 0 {
		return fmt.Errorf("%w: disk %s has a backing file of its own: flatten it with `qemu-img convert -O qcow2`", ErrInvalid, filepath.Base(path))
	}
	return nil
}
