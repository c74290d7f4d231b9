package profile

import "errors"

// Error categories of the resolver, wrapped with %w by every error it
// returns, so callers can tell them apart with errors.Is.
var (
	// ErrNixNotFound: no `nix` binary on $PATH.
	ErrNixNotFound = errors.New("nix not found in PATH")
	// ErrNoImages: the flake has no legacyPackages.<system>.images.
	ErrNoImages = errors.New("flake has no agentbox images")
	// ErrUnknownProfile: the flake has images, but not the one asked for.
	ErrUnknownProfile = errors.New("unknown profile")
	// ErrBuildFailed: `nix build` of a profile failed (the error carries a
	// *NixError with the exit status and the log tail).
	ErrBuildFailed = errors.New("nix build failed")
	// ErrNotLocked: the lock file does not exist or has no entry for the
	// profile on this system.
	ErrNotLocked = errors.New("profile not locked")
	// ErrMismatch: a built image differs from the lock (the error is a
	// *MismatchError naming the files and both hashes).
	ErrMismatch = errors.New("image differs from the lock")
	// ErrNotReproducible: `nix build --rebuild` produced different bytes
	// than the image already in the store.
	ErrNotReproducible = errors.New("image build is not reproducible")
	// ErrBadLock: the lock file cannot be read or has an unknown format.
	ErrBadLock = errors.New("unusable lock file")
)
