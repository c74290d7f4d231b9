package profile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
	if _, err := tmp.Write(data); err == nil {
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

// ReadLock reads the resolver's lock file (see ReadLockFile).
func (r *Resolver) ReadLock() (*LockFile, error) { return ReadLockFile(r.lockFile) }

// Lock builds the given profiles (all of the flake's when none are given),
// validates each image with image.Load, and records them for r's system in
// the lock file, keeping the entries of other profiles and systems; locking
// all profiles also drops this system's entries of profiles the flake no
// longer has. The file is written once, atomically, after every build
// succeeded, and returned.
func (r *Resolver) Lock(ctx context.Context, names []string) (*LockFile, error) {
	all := len(names) == 0
	if all {
		var err error
		if names, err = r.List(ctx); err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%w: flake %s has no profiles for %s: nothing to lock", ErrNoImages, r.flake, r.system)
		}
	}
	for _, n := range names {
		if err := checkName(n); err != nil {
			return nil, err
		}
	}
	lf, err := r.ReadLock()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		lf = &LockFile{}
	case err != nil:
		return nil, err
	}
	lf.Version = LockVersion
	rev, narHash, err := r.nixpkgs(ctx)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		dir, err := r.Resolve(ctx, name)
		if err != nil {
			return nil, err
		}
		img, err := image.Load(ctx, dir, image.LoadOptions{})
		if err != nil {
			return nil, fmt.Errorf("profile %s built an unusable image: %w", name, err)
		}
		// Load checked every file against the manifest's sha256, so the
		// manifest's table is the files' hashes.
		sums := map[string]string{image.ManifestName: img.Digest}
		for _, f := range []string{img.Manifest.Kernel, img.Manifest.Initrd, img.Manifest.Disk} {
			sums[f] = img.Manifest.SHA256[f]
		}
		lf.set(name, r.system, LockedImage{StorePath: dir, NixpkgsRev: rev, NixpkgsNarHash: narHash, SHA256: sums})
	}
	if all {
		for name, systems := range lf.Profiles {
			if !slices.Contains(names, name) {
				delete(systems, r.system)
				if len(systems) == 0 {
					delete(lf.Profiles, name)
				}
			}
		}
	}
	if err := lf.WriteFile(r.lockFile); err != nil {
		return nil, err
	}
	return lf, nil
}

// locked returns the lock's entry for profile name on r's system, or an
// ErrNotLocked error that says how to lock it.
func (r *Resolver) locked(name string) (LockedImage, error) {
	if err := checkName(name); err != nil {
		return LockedImage{}, err
	}
	lf, err := r.ReadLock()
	if errors.Is(err, fs.ErrNotExist) {
		return LockedImage{}, fmt.Errorf("%w: %s does not exist: run `agentbox profile lock` (or pass --lock FILE)", ErrNotLocked, r.lockFile)
	}
	if err != nil {
		return LockedImage{}, err
	}
	li, ok := lf.Get(name, r.system)
	if !ok {
		return LockedImage{}, fmt.Errorf("%w: profile %s is not in %s for %s: run `agentbox profile lock %s`", ErrNotLocked, name, r.lockFile, r.system, name)
	}
	return li, nil
}

// ResolveLocked builds profile name like Resolve and returns its image
// directory only if every file the lock records has the locked sha256;
// otherwise a *MismatchError (ErrMismatch) names each differing file with
// both hashes. A profile missing from the lock is ErrNotLocked.
func (r *Resolver) ResolveLocked(ctx context.Context, name string) (string, error) {
	li, err := r.locked(name)
	if err != nil {
		return "", err
	}
	dir, err := r.Resolve(ctx, name)
	if err != nil {
		return "", err
	}
	if err := r.compare(ctx, name, dir, li); err != nil {
		return "", err
	}
	return dir, nil
}

// Verify checks profile name against the lock: it builds the image,
// compares every file with the lock (a *MismatchError names each differing
// file with both hashes), then rebuilds it with `nix build --rebuild`,
// which fails (ErrNotReproducible) unless the new build is byte for byte
// the image in the store. It returns the image directory.
func (r *Resolver) Verify(ctx context.Context, name string) (string, error) {
	li, err := r.locked(name)
	if err != nil {
		return "", err
	}
	dir, err := r.Resolve(ctx, name)
	if err != nil {
		return "", err
	}
	if err := r.compare(ctx, name, dir, li); err != nil {
		return "", err
	}
	if _, err := r.build(ctx, name, true); err != nil {
		return "", err
	}
	return dir, nil
}

// FileMismatch is one file of an image whose sha256 differs from the lock.
type FileMismatch struct {
	// Name is the file name inside the image directory.
	Name string
	// Got is the file's hex sha256, "" when the file is missing.
	Got string
	// Locked is the hex sha256 the lock records.
	Locked string
}

// MismatchError is an image that differs from the lock. It wraps
// ErrMismatch.
type MismatchError struct {
	// Profile is the profile's name, Dir the image directory built.
	Profile, Dir string
	// LockFile is the lock file's path.
	LockFile string
	// Files are the differing files, sorted by name.
	Files []FileMismatch
}

// Error names every differing file with both hashes and says what to do.
func (e *MismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "profile %s: the image %s differs from %s: ", e.Profile, e.Dir, e.LockFile)
	for i, f := range e.Files {
		if i > 0 {
			b.WriteString("; ")
		}
		if f.Got == "" {
			fmt.Fprintf(&b, "%s is missing (the lock has sha256 %s)", f.Name, f.Locked)
		} else {
			fmt.Fprintf(&b, "%s has sha256 %s, the lock has %s", f.Name, f.Got, f.Locked)
		}
	}
	fmt.Fprintf(&b, ". Build the flake at the locked revision, or run `agentbox profile lock %s` if the change is intended", e.Profile)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrMismatch) true.
func (e *MismatchError) Unwrap() error { return ErrMismatch }

// compare hashes every file li records in dir and returns a
// *MismatchError listing those that differ.
func (r *Resolver) compare(ctx context.Context, name, dir string, li LockedImage) error {
	files := make([]string, 0, len(li.SHA256))
	for f := range li.SHA256 {
		files = append(files, f)
	}
	sort.Strings(files)
	var diff []FileMismatch
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if filepath.Base(f) != f || f == "." || f == ".." {
			return fmt.Errorf("%w: %s: profile %s names the file %q: want a plain file name", ErrBadLock, r.lockFile, name, f)
		}
		got, err := hashFile(filepath.Join(dir, f))
		if errors.Is(err, fs.ErrNotExist) {
			got, err = "", nil
		}
		if err != nil {
			return fmt.Errorf("profile %s: %w", name, err)
		}
		if got != li.SHA256[f] {
			diff = append(diff, FileMismatch{Name: f, Got: got, Locked: li.SHA256[f]})
		}
	}
	if len(diff) > 0 {
		return &MismatchError{Profile: name, Dir: dir, LockFile: r.lockFile, Files: diff}
	}
	return nil
}

// hashFile returns the hex sha256 of the file at path.
func hashFile(path string) (string, error) {
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

// nixpkgs returns the revision and NAR hash of the flake's nixpkgs input,
// from `nix flake metadata --json` (its "locks" are the flake.lock nix
// uses, local or remote flake alike); both empty when the flake has no
// nixpkgs input.
func (r *Resolver) nixpkgs(ctx context.Context) (rev, narHash string, err error) {
	out, err := r.runNix(ctx, nil, "flake", "metadata", "--json", r.flake)
	if err != nil {
		return "", "", fmt.Errorf("read the inputs of flake %s: %w", r.flake, err)
	}
	rev, narHash, err = nixpkgsFromMetadata(out)
	if err != nil {
		return "", "", fmt.Errorf("read the inputs of flake %s: %w", r.flake, err)
	}
	return rev, narHash, nil
}

// lockNode is a node of a flake.lock (format version 7): its inputs map an
// input name to a node name, or to a path of input names from the root
// (an input that "follows" another).
type lockNode struct {
	Inputs map[string]json.RawMessage `json:"inputs"`
	Locked struct {
		Rev     string `json:"rev"`
		NarHash string `json:"narHash"`
	} `json:"locked"`
}

// nixpkgsFromMetadata finds the root's "nixpkgs" input in the "locks" of
// `nix flake metadata --json` output and returns its locked rev and
// narHash (empty without such an input).
func nixpkgsFromMetadata(data []byte) (rev, narHash string, err error) {
	var meta struct {
		Locks struct {
			Nodes map[string]lockNode `json:"nodes"`
			Root  string              `json:"root"`
		} `json:"locks"`
	}
	if err := json.Unmarshal(data, &meta); err != nil {
		return "", "", fmt.Errorf("nix flake metadata --json: %w", err)
	}
	nodes := meta.Locks.Nodes
	node, ok, err := followInput(nodes, meta.Locks.Root, meta.Locks.Root, []string{"nixpkgs"}, 0)
	if err != nil || !ok {
		return "", "", err
	}
	n := nodes[node]
	return n.Locked.Rev, n.Locked.NarHash, nil
}

// followInput resolves path (input names, starting at node from) to a node
// name; ok is false when an input does not exist. A "follows" list starts
// at node root. depth bounds "follows" chains.
func followInput(nodes map[string]lockNode, root, from string, path []string, depth int) (node string, ok bool, err error) {
	if depth > 32 {
		return "", false, errors.New("flake.lock: input follows form a cycle")
	}
	cur := from
	for _, in := range path {
		raw, ok := nodes[cur].Inputs[in]
		if !ok {
			return "", false, nil
		}
		var target string
		if err := json.Unmarshal(raw, &target); err == nil {
			cur = target
			continue
		}
		var follows []string
		if err := json.Unmarshal(raw, &follows); err != nil {
			return "", false, fmt.Errorf("flake.lock: input %s of node %s is %s: want a node name or a list of input names", in, cur, raw)
		}
		next, ok, err := followInput(nodes, root, root, follows, depth+1)
		if err != nil || !ok {
			return "", ok, err
		}
		cur = next
	}
	if _, ok := nodes[cur]; !ok {
		return "", false, fmt.Errorf("flake.lock: input node %q does not exist", cur)
	}
	return cur, true, nil
}

// DefaultLockFile returns where the lock file of flake lives by default:
// agentbox.lock in the flake's directory when the flake is a local
// directory outside the Nix store (".", "./dir", "/abs/dir", "path:DIR",
// "git+file:///DIR?dir=SUB"), else agentbox.lock in the current directory
// (a remote flake, or the read-only store copy that `nix run
// .#agentbox` knows its flake by).
func DefaultLockFile(flake string) string {
	dir, ok := localFlakeDir(flake)
	if !ok || dir == "/nix/store" || strings.HasPrefix(dir, "/nix/store/") {
		return DefaultLockName
	}
	return filepath.Join(dir, DefaultLockName)
}

// localFlakeDir returns the directory of a local flake reference.
func localFlakeDir(ref string) (string, bool) {
	ref, query, _ := strings.Cut(ref, "?")
	switch {
	case strings.HasPrefix(ref, "path:"):
		ref = strings.TrimPrefix(ref, "path:")
	case strings.HasPrefix(ref, "git+file://"):
		ref = strings.TrimPrefix(ref, "git+file://")
	case ref == "." || ref == ".." || strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, "./") || strings.HasPrefix(ref, "../"):
	default:
		return "", false
	}
	if ref == "" {
		return "", false
	}
	if q, err := url.ParseQuery(query); err == nil && q.Get("dir") != "" {
		ref = filepath.Join(ref, q.Get("dir"))
	}
	return filepath.Clean(ref), true
}
