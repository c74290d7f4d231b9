package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// daemonExec runs req in sandbox ref through the daemon with this
// process's stdio and maps the outcome to the CLI's exit status. Without
// stdin to forward it is one streaming exec; with stdin it is a detached
// process whose stdin is fed from ours while its output is followed. When
// ctx ends (SIGINT/SIGTERM) the command is killed and the error wraps
// ctx's; the caller maps it to 128+N.
func daemonExec(ctx context.Context, c *cli.Context, cl *client.Client, ref string, req api.ExecRequest) error {
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	stdin := forwardedStdin(c)
	if stdin == nil {
		st, err := cl.Exec(ctx, ref, req, c.App.Writer, c.App.ErrWriter)
		if ctx.Err() != nil {
			return interrupted(ctx, err)
		}
		if err != nil {
			return err
		}
		return exitFor(guestStatus(st, timeout))
	}
	st, err := cl.ExecWithStdin(ctx, ref, req, stdin, c.App.Writer, c.App.ErrWriter)
	killed := ctx.Err() != nil && errors.Is(err, ctx.Err()) // started, then interrupted
	var ke *client.KillError
	if killed && errors.As(err, &ke) {
		fmt.Fprintf(c.App.ErrWriter, "agentbox: %v\n", ke) // the interruption's message hides it
	}
	switch {
	case killed:
		return interrupted(ctx, err)
	case errors.Is(err, client.ErrProcessLost):
		return fmt.Errorf("%w: see `agentbox ps %s`", err, ref)
	case err != nil:
		return err
	}
	return exitFor(guestStatus(st, timeout))
}

// interrupted is the error for a command whose ctx ended (a signal); the
// caller turns it into 128+N.
func interrupted(ctx context.Context, err error) error {
	if err == nil {
		err = ctx.Err()
	}
	return fmt.Errorf("%w (%w)", errGuestKilled, err)
}

// errGuestKilled marks a guest command killed because we were interrupted.
var errGuestKilled = errors.New("guest command killed")
