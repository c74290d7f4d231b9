package profile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/vmctl/image"
)

// DefaultLockName is the lock file's name next to a local flake.
const DefaultLockName = "agentbox.lock"

// LockVersion is the lock file format this build reads and writes.
const LockVersion = 1

// lockHeader opens every lock file written.
const lockHeader = "# agentbox.lock: the images of this flake's profiles, byte for byte.\n" +
	"# Written by `agentbox profile lock`; checked by `agentbox profile verify` and `agentbox run --locked`.\n\n"

// LockFile is the parsed lock file:
//
//	version = 1
//	[profiles.python.x86_64-linux]
//	store_path = "/nix/store/…-agentbox-image-python"
//	nixpkgs_rev = "10e7ad5b…"
//	nixpkgs_nar_hash = "sha256-…"
//	[profiles.python.x86_64-linux.sha256]
//	"manifest.toml" = "<64 hex digits>"
//	"rootfs.qcow2" = "<64 hex digits>"
//	…
type LockFile struct {
	// Version is the format version, LockVersion.
	Version int `toml:"version"`
	// Profiles maps a profile name and a Nix system to the image locked
	// for it.
	Profiles map[string]map[string]LockedImage `toml:"profiles"`
}

// LockedImage is what the lock records of one profile's image on one
// system.
type LockedImage struct {
	// StorePath is the image directory that was locked. It is
	// informational: a different path with the same bytes (the flake's
	// source changed elsewhere) still matches the lock.
	StorePath string `toml:"store_path"`
	// NixpkgsRev and NixpkgsNarHash are the revision and NAR hash of the
	// flake's nixpkgs input (from its flake.lock) when the image was
	// locked; empty for a flake without a nixpkgs input or one without a
	// revision (a path input).
	NixpkgsRev     string `toml:"nixpkgs_rev"`
	NixpkgsNarHash string `toml:"nixpkgs_nar_hash"`
	// SHA256 maps every file of the image (manifest.toml and the files it
	// names) to its lowercase hex sha256.
	SHA256 map[string]string `toml:"sha256"`
}

// Digest is the sha256 of the image's manifest.toml, which holds the
// sha256 of every other file: it identifies the whole image (as
// image.Image.Digest does).
func (l LockedImage) Digest() string { return l.SHA256[image.ManifestName] }

// Get returns the image locked for profile name on system, if any.
func (lf *LockFile) Get(name, system string) (LockedImage, bool) {
	li, ok := lf.Profiles[name][system]
	return li, ok
}

// set records li for profile name on system.
func (lf *LockFile) set(name, system string, li LockedImage) {
	if lf.Profiles == nil {
		lf.Profiles = map[string]map[string]LockedImage{}
	}
	if lf.Profiles[name] == nil {
		lf.Profiles[name] = map[string]LockedImage{}
	}
	lf.Profiles[name][system] = li
}

// ReadLockFile reads and checks the lock file at path. A missing file is an
// error wrapping fs.ErrNotExist; an unparsable one, unknown keys or another
// format version wrap ErrBadLock.
func ReadLockFile(path string) (*LockFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var lf LockFile
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&lf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadLock, path, err)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		keys := make([]string, len(undec))
		for i, k := range undec {
			keys[i] = k.String()
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("%w: %s: unknown keys %s: was it written by a newer agentbox?", ErrBadLock, path, strings.Join(keys, ", "))
	}
	if lf.Version != LockVersion {
		return nil, fmt.Errorf("%w: %s has version = %d, this agentbox reads %d: lock again with `agentbox profile lock`", ErrBadLock, path, lf.Version, LockVersion)
	}
	for name, systems := range lf.Profiles {
		for system, li := range systems {
			if li.Digest() == "" {
				return nil, fmt.Errorf("%w: %s: profiles.%s.%s has no sha256 of %s", ErrBadLock, path, name, system, image.ManifestName)
			}
		}
	}
	return &lf, nil
}

// Encode returns the lock file's TOML: a header comment, the version, then
// one table per profile and system with its sha256 table, everything
// sorted, so the same content always gives the same bytes. Unset fields are
// written as "" (a diff then shows what changed, never a key appearing).
func (lf *LockFile) Encode() []byte {
	var b bytes.Buffer
	b.WriteString(lockHeader)
	fmt.Fprintf(&b, "version = %d\n", lf.Version)
	for _, name := range sortedKeys(lf.Profiles) {
		systems := lf.Profiles[name]
		for _, system := range sortedKeys(systems) {
			li := systems[system]
			table := "profiles." + tomlKey(name) + "." + tomlKey(system)
			fmt.Fprintf(&b, "\n[%s]\n", table)
			fmt.Fprintf(&b, "store_path = %s\n", tomlString(li.StorePath))
			fmt.Fprintf(&b, "nixpkgs_rev = %s\n", tomlString(li.NixpkgsRev))
			fmt.Fprintf(&b, "nixpkgs_nar_hash = %s\n", tomlString(li.NixpkgsNarHash))
			fmt.Fprintf(&b, "\n[%s.sha256]\n", table)
			for _, f := range sortedKeys(li.SHA256) {
				fmt.Fprintf(&b, "%s = %s\n", tomlKey(f), tomlString(li.SHA256[f]))
			}
		}
	}
	return b.Bytes()
}

// sortedKeys returns the keys of m in ascending order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// bareKey matches the TOML keys that need no quotes.
var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// tomlKey returns k as a TOML key: bare when it can be, else quoted.
func tomlKey(k string) string {
	if bareKey.MatchString(k) {
		return k
	}
	return tomlString(k)
}

// tomlString returns s as a TOML basic string: quotes and backslashes
// escaped, control characters as \uXXXX, invalid UTF-8 as U+FFFD.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// WriteFile writes the lock file to path atomically: a temporary file in the
// same directory, synced, then renamed over path.
func (lf *LockFile) WriteFile(path string) error {
	data := lf.Encode()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w (pass --lock FILE to write it elsewhere)", path, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
