package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// exactArgs checks that the command got n positional arguments and no
// stray flag after them (urfave/cli stops parsing flags at the first
// argument, so `rm ID -f` would pass "-f" as an ID).
func exactArgs(c *cli.Context, n int, usage string) ([]string, error) {
	args := c.Args().Slice()
	if err := noFlagsAfter(args, usage); err != nil {
		return nil, err
	}
	if len(args) != n {
		return nil, fmt.Errorf("want %d argument(s), got %d: usage: %s", n, len(args), usage)
	}
	return args, nil
}

// someArgs is exactArgs for commands that take one or more arguments.
func someArgs(c *cli.Context, usage string) ([]string, error) {
	args := c.Args().Slice()
	if err := noFlagsAfter(args, usage); err != nil {
		return nil, err
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("no argument given: usage: %s", usage)
	}
	return args, nil
}

// noFlagsAfter refuses an argument that looks like a flag ("-" alone is an
// argument: stdin or stdout).
func noFlagsAfter(args []string, usage string) error {
	for _, a := range args {
		if len(a) > 1 && a[0] == '-' {
			return fmt.Errorf("%q after the arguments: flags go before them: usage: %s", a, usage)
		}
	}
	return nil
}
