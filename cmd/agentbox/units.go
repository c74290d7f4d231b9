package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"
)

// age renders a duration the way `ls` shows ages: 45s, 12m, 3h, 5d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d/time.Second)))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	}
	return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
}

// mib renders a byte count in MiB with one decimal.
func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// wholeSeconds returns the duration flag name in seconds (0 when unset);
// it must be positive and a whole number of seconds, since the API counts
// lifetimes in seconds.
func wholeSeconds(c *cli.Context, name string) (int64, error) {
	d := c.Duration(name)
	switch {
	case d == 0:
		return 0, nil
	case d < 0:
		return 0, fmt.Errorf("--%s %s: must be positive", name, d)
	case d%time.Second != 0:
		return 0, fmt.Errorf("--%s %s: must be whole seconds (e.g. 90s, 30m, 2h)", name, d)
	}
	return int64(d / time.Second), nil
}
