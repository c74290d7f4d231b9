package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// verifyCache remembers which files were hashed, by file identity.
type verifyCache struct {
	dir string // "" disables the cache
}

// fileIdentity is what must be unchanged for a remembered hash to count.
type fileIdentity struct {
	Dev     uint64 `json:"dev"`
	Inode   uint64 `json:"inode"`
	Size    int64  `json:"size"`
	MtimeNs int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
}

func newVerifyCache(dir string) *verifyCache { return &verifyCache{dir: dir} }

// verify checks that path is a regular file whose sha256 is want.
func (c *verifyCache) verify(path, want string) error {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s is missing: the image directory is incomplete, rebuild it", ErrInvalid, filepath.Base(path))
		}
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrInvalid, filepath.Base(path))
	}
	id, ok := identity(fi)
	entry := c.entryPath(path)
	if ok && entry != "" {
		if data, err := os.ReadFile(entry); err == nil {
			var old fileIdentity
			if json.Unmarshal(data, &old) == nil && old.SHA256 == want &&
				old.Dev == id.Dev && old.Inode == id.Inode && old.Size == id.Size && old.MtimeNs == id.MtimeNs {
				return nil
			}
		}
	}
	got, err := HashFile(path)
	if err != nil {
		return fmt.Errorf("%w: hashing %s: %v", ErrInvalid, filepath.Base(path), err)
	}
	if got != want {
		return fmt.Errorf("%w: %s has sha256 %s but manifest.toml says %s: the file changed after the image was built; rebuild the image", ErrInvalid, filepath.Base(path), got, want)
	}
	if ok && entry != "" {
		id.SHA256 = got
		if data, err := json.Marshal(id); err == nil {
			// Best effort: a cache that cannot be written only costs time.
			if os.MkdirAll(c.dir, 0o700) == nil { // the daemon's: not QEMU's users (docs/security.md)
				tmp := entry + ".tmp"
				if os.WriteFile(tmp, data, 0o600) == nil {
					_ = os.Rename(tmp, entry)
				}
			}
		}
	}
	return nil
}

// entryPath names the cache entry of path: the sha256 of the absolute path.
func (c *verifyCache) entryPath(path string) string {
	if c.dir == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(c.dir, hex.EncodeToString(sum[:16])+".json")
}

func identity(fi fs.FileInfo) (fileIdentity, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileIdentity{}, false
	}
	return fileIdentity{
		Dev:     uint64(st.Dev),
		Inode:   st.Ino,
		Size:    fi.Size(),
		MtimeNs: fi.ModTime().UnixNano(),
	}, true
}
