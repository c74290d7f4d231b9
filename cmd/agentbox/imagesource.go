package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/profile"
)

// profileFlags select the flake, lock file and system of profile
// commands. They exist globally (`agentbox --flake REF profile ls`) and on
// every command that resolves profiles (`agentbox run --flake REF ...`);
// profileOption reads the innermost one set.
func profileFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "flake", Value: profile.DefaultFlake, Usage: "the flake `REF` whose profiles (legacyPackages.SYSTEM.images.NAME) are built, as nix takes it", EnvVars: []string{"AGENTBOX_FLAKE"}},
		&cli.StringFlag{Name: "lock", Usage: "the lock `FILE`", DefaultText: "agentbox.lock in the flake's directory for a local flake, else in the current directory"},
		&cli.StringFlag{Name: "system", Usage: "the Nix `SYSTEM` to build images for", DefaultText: "this machine's: x86_64-linux or aarch64-linux"},
	}
}

// profileOption returns the value of profile flag name from the innermost
// command that has it set to a non-empty value (command line, environment
// or config file), else its default.
func profileOption(c *cli.Context, name string) string {
	for _, cc := range c.Lineage() {
		if cc.IsSet(name) && cc.String(name) != "" {
			return cc.String(name)
		}
	}
	return c.String(name)
}

// newResolver returns the profile resolver the flags select; nix's progress
// goes to progress (nil: only into error messages).
func newResolver(c *cli.Context, progress io.Writer) (*profile.Resolver, error) {
	nixArgs, err := profile.NixArgsFromEnv()
	if err != nil {
		return nil, err
	}
	return profile.New(profile.Options{
		Flake:    profileOption(c, "flake"),
		System:   profileOption(c, "system"),
		LockFile: profileOption(c, "lock"),
		NixArgs:  nixArgs,
		Progress: progress,
	})
}

// resolveProfile builds profile name for `run` and `create` and returns its
// image directory; with --locked it refuses an image that differs from the
// lock. nix's progress is shown on a terminal or with verbose (otherwise
// stderr stays the guest command's own), and a failure quotes its last
// lines either way.
func resolveProfile(ctx context.Context, c *cli.Context, name string, verbose bool) (string, error) {
	var progress io.Writer
	if verbose || isTerminal(os.Stderr) {
		progress = c.App.ErrWriter
	}
	r, err := newResolver(c, progress)
	if err != nil {
		return "", err
	}
	if c.Bool("locked") {
		return r.ResolveLocked(ctx, name)
	}
	return r.Resolve(ctx, name)
}

// imageArgs splits the arguments of `run` and `create` into a profile and
// the rest. With --image DIR (or $AGENTBOX_IMAGE) all arguments are the
// rest, as before profiles existed. Otherwise the first argument is the
// profile and, when withCommand, it must be followed by "--" and the
// command. --locked needs a profile. profileUsage shows the profile form of
// the command line in errors.
func imageArgs(c *cli.Context, withCommand bool, profileUsage string) (name string, rest []string, err error) {
	args := c.Args().Slice()
	if c.String("image") != "" {
		if c.Bool("locked") {
			return "", nil, fmt.Errorf("--locked checks a PROFILE against the lock file, not --image DIR: use `%s`", profileUsage)
		}
		return "", args, nil
	}
	noImage := fmt.Errorf("no image: pass --image DIR (or set AGENTBOX_IMAGE), or a profile of the flake: `%s` (see `agentbox profile ls`); `make test-image` builds an image", profileUsage)
	switch {
	case len(args) == 0:
		return "", nil, noImage
	case !withCommand:
		return args[0], args[1:], nil
	case len(args) >= 2 && args[1] == "--":
		return args[0], args[2:], nil
	}
	return "", nil, noImage
}
