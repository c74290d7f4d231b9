package profile

import "github.com/agentbox/agentbox/vmctl/errdefs"

// Error categories of the resolver, wrapped with %w by every error it
// returns, so callers can tell them apart with errors.Is. Each is a
// sentinel of an errdefs category (the CLI is their only front: every
// category exits 125 there).
var (
	// ErrNixNotFound: no `nix` binary on $PATH.
	ErrNixNotFound = errdefs.New(errdefs.ErrFailedPrecondition, "", "nix not found in PATH")
	// ErrNoImages: the flake has no legacyPackages.<system>.images.
	ErrNoImages = errdefs.New(errdefs.ErrNotFound, "", "flake has no agentbox images")
	// ErrUnknownProfile: the flake has images, but not the one asked for.
	ErrUnknownProfile = errdefs.New(errdefs.ErrNotFound, "", "unknown profile")
	// ErrBuildFailed: `nix build` of a profile failed (the error carries a
	// *NixError with the exit status and the log tail).
	ErrBuildFailed = errdefs.New(errdefs.ErrInternal, "", "nix build failed")
	// ErrNotLocked: the lock file does not exist or has no entry for the
	// profile on this system.
	ErrNotLocked = errdefs.New(errdefs.ErrFailedPrecondition, "", "profile not locked")
	// ErrMismatch: a built image differs from the lock (the error is a
	// *MismatchError naming the files and both hashes).
	ErrMismatch = errdefs.New(errdefs.ErrFailedPrecondition, "", "image differs from the lock")
	// ErrNotReproducible: `nix build --rebuild` produced different bytes
	// than the image already in the store.
	ErrNotReproducible = errdefs.New(errdefs.ErrFailedPrecondition, "", "image build is not reproducible")
	// ErrBadLock: the lock file cannot be read or has an unknown format.
	ErrBadLock = errdefs.New(errdefs.ErrInvalidArgument, "", "unusable lock file")
)
