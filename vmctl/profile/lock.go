package profile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/agentbox/agentbox/vmctl/image"
)

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
	dir, err := r.ResolveLocked(ctx, name)
	if err != nil {
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
		got, err := image.HashFile(filepath.Join(dir, f))
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
