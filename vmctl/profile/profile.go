// Package profile turns agentbox profile names into image directories by
// building them with Nix, and pins what they built in a lock file.
//
// A profile is an attribute of a flake: legacyPackages.<system>.images.<name>
// is a derivation whose output directory is an image directory in the
// contract of docs/image-format.md (manifest.toml, kernel, initrd, qcow2
// disk), the same contract `agentbox run --image DIR` takes. The resolver
// runs the nix CLI (nix build, nix eval, nix flake metadata) with flakes
// enabled, streams nix's progress, and reports a missing nix, an unknown
// profile or a failed build with what to do.
//
// The lock file (agentbox.lock, TOML) records per profile and system the
// image's store path, the sha256 of every file of the image (manifest.toml
// and the files it names) and the nixpkgs revision the flake was locked to.
// ResolveLocked refuses an image whose bytes differ from it, and Verify also
// rebuilds the image (`nix build --rebuild`) to prove the build itself is
// reproducible.
package profile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
)

// DefaultFlake is the flake reference used when none is given: the flake
// in the current directory.
const DefaultFlake = "."

// Options configure a Resolver. The zero value resolves profiles of the
// flake in the current directory for this machine's system.
type Options struct {
	// Flake is the flake reference, as nix takes it: ".", "/abs/dir",
	// "path:/dir", "github:owner/repo/rev"... Default DefaultFlake. It must
	// not carry a "#fragment": the resolver appends the attribute path.
	Flake string
	// System is the Nix system whose images are built, e.g.
	// "x86_64-linux". Default: SystemFor(runtime.GOARCH).
	System string
	// LockFile is the path of the lock file. Default:
	// DefaultLockFile(Flake).
	LockFile string
	// NixArgs are passed to every nix command after its subcommand, e.g.
	// {"--option", "substituters", ""} (NixArgsFromEnv reads them from
	// $AGENTBOX_NIX_ARGS). `--extra-experimental-features 'nix-command
	// flakes'` is always passed besides.
	NixArgs []string
	// Progress receives nix build's stderr (its progress lines and, with
	// the -L the resolver passes, the build logs) while it runs. Nil
	// discards it; a failure still quotes its last 20 lines.
	Progress io.Writer
}

// Resolver builds the profiles of one flake for one system. Its methods
// are safe for concurrent use (each runs its own nix processes), except
// that Lock calls must not overlap on the same lock file.
type Resolver struct {
	flake, system, lockFile string
	nixArgs                 []string
	progress                io.Writer
}

// New returns a Resolver for opts, after filling in its defaults. It fails
// for a flake reference with a '#' and a GOARCH without a Linux Nix system.
func New(opts Options) (*Resolver, error) {
	r := &Resolver{
		flake:    opts.Flake,
		system:   opts.System,
		lockFile: opts.LockFile,
		nixArgs:  append([]string(nil), opts.NixArgs...),
		progress: opts.Progress,
	}
	if r.flake == "" {
		r.flake = DefaultFlake
	}
	if strings.Contains(r.flake, "#") {
		return nil, fmt.Errorf("flake %q: give the flake without a #fragment; the profile is named separately", r.flake)
	}
	if r.system == "" {
		sys, err := SystemFor(runtime.GOARCH)
		if err != nil {
			return nil, err
		}
		r.system = sys
	}
	if r.lockFile == "" {
		r.lockFile = DefaultLockFile(r.flake)
	}
	return r, nil
}

// Flake returns the flake reference the resolver builds from.
func (r *Resolver) Flake() string { return r.flake }

// System returns the Nix system the resolver builds for.
func (r *Resolver) System() string { return r.system }

// LockFile returns the path of the lock file.
func (r *Resolver) LockFile() string { return r.lockFile }

// SystemFor returns the Nix system of Linux on a Go GOARCH: amd64 is
// "x86_64-linux", arm64 "aarch64-linux". Other architectures are an error
// (agentbox images exist for those two).
func SystemFor(goarch string) (string, error) {
	switch goarch {
	case "amd64":
		return "x86_64-linux", nil
	case "arm64":
		return "aarch64-linux", nil
	}
	return "", fmt.Errorf("no agentbox images for GOARCH %s: pass the Nix system (x86_64-linux or aarch64-linux) explicitly", goarch)
}

// profileName is a Nix identifier: what can follow "images." in an
// attribute path without quoting, and nothing that could change the
// installable's meaning ('#', '.', '?').
var profileName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_'-]*$`)

// checkName refuses a profile name that is not a plain Nix identifier.
func checkName(name string) error {
	if !profileName.MatchString(name) {
		return fmt.Errorf("%w %q: a profile name is a Nix identifier (letters, digits, _, ' and -, not starting with a digit)", ErrUnknownProfile, name)
	}
	return nil
}

// imagesAttr is the attribute path of the flake's image set for r's system.
func (r *Resolver) imagesAttr() string {
	return "legacyPackages." + r.system + ".images"
}

// installable names profile's image derivation: FLAKE#legacyPackages.SYSTEM.images.NAME.
func (r *Resolver) installable(name string) string {
	return r.flake + "#" + r.imagesAttr() + "." + name
}

// List returns the names of the flake's profiles for r's system, sorted,
// from `nix eval --json FLAKE#legacyPackages.SYSTEM.images --apply
// builtins.attrNames`. A flake without that attribute set is ErrNoImages.
func (r *Resolver) List(ctx context.Context) ([]string, error) {
	out, err := r.runNix(ctx, nil, "eval", "--json", r.flake+"#"+r.imagesAttr(), "--apply", "builtins.attrNames")
	if err != nil {
		var ne *NixError
		if errors.As(err, &ne) && ne.mentions("does not provide attribute") {
			return nil, fmt.Errorf("%w: flake %s has no %s: is it an agentbox flake (see docs/nix.md), and is %s the right system? (%w)", ErrNoImages, r.flake, r.imagesAttr(), r.system, err)
		}
		return nil, fmt.Errorf("list the profiles of flake %s: %w", r.flake, err)
	}
	var names []string
	if err := json.Unmarshal(out, &names); err != nil {
		return nil, fmt.Errorf("list the profiles of flake %s: nix eval printed %.200q: %w", r.flake, out, err)
	}
	slices.Sort(names)
	return names, nil
}

// Resolve builds profile name (`nix build --json --no-link -L
// FLAKE#legacyPackages.SYSTEM.images.NAME`, streaming nix's progress) and
// returns the image directory, a store path. A profile the flake lacks is
// ErrUnknownProfile listing those it has; a failed build is ErrBuildFailed
// with nix's exit status and last lines. The image is not validated: pass
// the directory to image.Load.
func (r *Resolver) Resolve(ctx context.Context, name string) (string, error) {
	return r.build(ctx, name, false)
}

// build runs nix build for profile name, with --rebuild when rebuild is
// set (nix then builds the derivation again and fails if the output
// differs from the one in the store), and returns the output path.
func (r *Resolver) build(ctx context.Context, name string, rebuild bool) (string, error) {
	if err := checkName(name); err != nil {
		return "", err
	}
	args := []string{"--json", "--no-link", "-L"}
	if rebuild {
		args = append(args, "--rebuild")
	}
	out, err := r.runNix(ctx, r.progress, "build", append(args, r.installable(name))...)
	if err != nil {
		var ne *NixError
		if !errors.As(err, &ne) {
			return "", fmt.Errorf("build profile %s: %w", name, err)
		}
		return "", r.buildError(ctx, name, ne, rebuild)
	}
	var results []struct {
		Outputs map[string]string `json:"outputs"`
	}
	if err := json.Unmarshal(out, &results); err != nil || len(results) != 1 || results[0].Outputs["out"] == "" {
		return "", fmt.Errorf("build profile %s: nix build --json printed %.300q, want one derivation with an \"out\" output", name, out)
	}
	dir := results[0].Outputs["out"]
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("build profile %s: nix build gave the output path %q, want an absolute path", name, dir)
	}
	return dir, nil
}

// buildError classifies a failed nix build of profile name: a profile the
// flake does not have (checked with List, so an unknown name is reported
// as such however nix words it), a non-reproducible rebuild, or a failed
// build.
func (r *Resolver) buildError(ctx context.Context, name string, ne *NixError, rebuild bool) error {
	names, lerr := r.List(ctx)
	switch {
	case errors.Is(lerr, ErrNoImages):
		return lerr
	case lerr == nil && !slices.Contains(names, name):
		have := "it has none"
		if len(names) > 0 {
			have = "it has " + strings.Join(names, ", ")
		}
		return fmt.Errorf("%w %q: flake %s has no profile %s for %s (%s): see `agentbox profile ls`", ErrUnknownProfile, name, r.flake, name, r.system, have)
	case rebuild && ne.mentions("may not be deterministic"):
		return fmt.Errorf("%w: profile %s: a rebuild of its image differs from the image in the store; make the image derivation deterministic (fixed timestamps, UUIDs, hash seeds): %w", ErrNotReproducible, name, ne)
	}
	return fmt.Errorf("%w: profile %s: %w", ErrBuildFailed, name, ne)
}
