package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/client"
)

// joinRefErrors reports the errors of a command over several sandboxes:
// all but the last are printed, the last is returned (exit 125). An
// unreachable daemon is returned at once so it gets its hint.
func joinRefErrors(c *cli.Context, errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	for _, err := range errs[:len(errs)-1] {
		if errors.Is(err, client.ErrUnreachable) {
			return err
		}
		fmt.Fprintln(c.App.ErrWriter, "agentbox:", err)
	}
	return errs[len(errs)-1]
}
