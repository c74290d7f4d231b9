package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/profile"
)

func profileCommand() *cli.Command {
	return &cli.Command{
		Name:  "profile",
		Usage: "list, lock and verify the flake's profiles (images built by Nix)",
		Description: "A profile is an image the flake builds: legacyPackages.SYSTEM.images.NAME, a derivation whose\n" +
			"output is an image directory (docs/image-format.md). `agentbox run PROFILE -- CMD` builds it\n" +
			"with nix and boots it. The lock file (agentbox.lock) records the sha256 of every file of each\n" +
			"profile's image and the flake's nixpkgs revision; `run --locked` refuses an image that differs.\n\n" +
			"--flake REF (default $AGENTBOX_FLAKE, else \".\"), --lock FILE and --system SYSTEM choose the flake,\n" +
			"the lock file and the system. $AGENTBOX_NIX_ARGS adds arguments to every nix command (split like\n" +
			"a shell line, e.g. \"--option substituters ''\").",
		Subcommands: []*cli.Command{
			{
				Name:         "ls",
				Aliases:      []string{"list"},
				Usage:        "list the flake's profiles and their locked image hashes",
				Description:  "Prints NAME, LOCKED (yes or no, for this system) and IMAGE-SHA256: the first 12 hex digits\nof the locked manifest.toml's sha256, which identifies the whole image.",
				Flags:        profileFlags(),
				OnUsageError: usageError,
				Action:       profileAction(profileLs),
			},
			{
				Name:      "lock",
				Usage:     "build profiles and record their images in the lock file",
				ArgsUsage: "[PROFILE...]",
				Description: "Builds each PROFILE (all of the flake's by default), checks its image, and writes the sha256\n" +
					"of every file, the store path and the flake's nixpkgs revision to the lock file (atomically,\n" +
					"once all builds succeeded). Entries of other profiles and systems are kept; locking all\n" +
					"profiles drops this system's entries of profiles the flake no longer has.",
				Flags:        profileFlags(),
				OnUsageError: usageError,
				Action:       profileAction(profileLock),
			},
			{
				Name:      "verify",
				Usage:     "rebuild profiles and compare them with the lock file byte for byte",
				ArgsUsage: "[PROFILE...]",
				Description: "For each PROFILE (all locked ones by default): builds its image, compares every file's sha256\n" +
					"with the lock, then rebuilds it (`nix build --rebuild`), which fails unless the new build is\n" +
					"byte for byte the same. Exit status 0 when all match, 125 otherwise (each failure names the\n" +
					"file and both hashes).",
				Flags:        profileFlags(),
				OnUsageError: usageError,
				Action:       profileAction(profileVerify),
			},
		},
	}
}

// profileAction wraps a profile subcommand: config file, a resolver whose
// nix progress goes to stderr, and a ctx that SIGINT/SIGTERM cancel (exit
// 128+N).
func profileAction(fn func(ctx context.Context, c *cli.Context, r *profile.Resolver) error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if err := applyConfig(c); err != nil {
			return err
		}
		r, err := newResolver(c, c.App.ErrWriter)
		if err != nil {
			return err
		}
		ctx, gotSignal, stop := interrupts(c.Context)
		defer stop()
		err = fn(ctx, c, r)
		if sig := gotSignal(); sig != 0 {
			return signalExit(sig, "interrupted")
		}
		return err
	}
}

// readLockOrEmpty reads the resolver's lock file; a missing one is empty.
func readLockOrEmpty(r *profile.Resolver) (*profile.LockFile, error) {
	lf, err := r.ReadLock()
	if errors.Is(err, fs.ErrNotExist) {
		return &profile.LockFile{}, nil
	}
	return lf, err
}

// lockedNames returns the profiles lf locks for system, sorted.
func lockedNames(lf *profile.LockFile, system string) []string {
	var names []string
	for n := range lf.Profiles {
		if _, ok := lf.Get(n, system); ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// shortDigest is the first 12 hex digits of an image digest.
func shortDigest(d string) string { return d[:min(12, len(d))] }

func profileLs(ctx context.Context, c *cli.Context, r *profile.Resolver) error {
	if _, err := exactArgs(c, 0, "agentbox profile ls [--flake REF] [--lock FILE]"); err != nil {
		return err
	}
	names, err := r.List(ctx)
	if err != nil {
		return err
	}
	lf, err := readLockOrEmpty(r)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLOCKED\tIMAGE-SHA256")
	for _, n := range names {
		locked, digest := "no", "-"
		if li, ok := lf.Get(n, r.System()); ok {
			locked, digest = "yes", shortDigest(li.Digest())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, locked, digest)
	}
	return tw.Flush()
}

func profileLock(ctx context.Context, c *cli.Context, r *profile.Resolver) error {
	names := c.Args().Slice()
	if err := noFlagsAfter(names, "agentbox profile lock [FLAGS] [PROFILE...]"); err != nil {
		return err
	}
	lf, err := r.Lock(ctx, names)
	if err != nil {
		return err
	}
	if len(names) == 0 { // all: the lock now has this system's entry of each
		names = lockedNames(lf, r.System())
	}
	for _, n := range names {
		li, _ := lf.Get(n, r.System())
		fmt.Fprintf(c.App.Writer, "locked %s %s %s\n", n, shortDigest(li.Digest()), li.StorePath)
	}
	fmt.Fprintf(c.App.Writer, "wrote %s\n", r.LockFile())
	return nil
}

func profileVerify(ctx context.Context, c *cli.Context, r *profile.Resolver) error {
	names := c.Args().Slice()
	if err := noFlagsAfter(names, "agentbox profile verify [FLAGS] [PROFILE...]"); err != nil {
		return err
	}
	if len(names) == 0 {
		lf, err := r.ReadLock()
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s does not exist: run `agentbox profile lock` first (or pass --lock FILE)", r.LockFile())
		}
		if err != nil {
			return err
		}
		if names = lockedNames(lf, r.System()); len(names) == 0 {
			return fmt.Errorf("%s locks no profile for %s: run `agentbox profile lock`", r.LockFile(), r.System())
		}
	}
	var errs []error
	for _, n := range names {
		if _, err := r.Verify(ctx, n); err != nil {
			if ctx.Err() != nil {
				return err
			}
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(c.App.Writer, "verified %s: the image matches %s and rebuilds byte for byte\n", n, r.LockFile())
	}
	return errors.Join(errs...)
}
