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
// process's stdio and maps the outcome to the CLI's exit status. With -t
// the command runs on a terminal (ttyExec); with stdin to forward it is
// the interactive exec, stdin streamed over its WebSocket as the command
// reads it; without, one streaming exec. When ctx ends (SIGINT/SIGTERM)
// the command is killed and the error wraps ctx's; the caller maps it to
// 128+N.
func daemonExec(ctx context.Context, c *cli.Context, cl *client.Client, ref string, req api.ExecRequest) error {
	if c.Bool("tty") {
		return ttyExec(ctx, c, cl, ref, req)
	}
	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	var st api.ExitStatus
	var err error
	if stdin := forwardedStdin(c); stdin != nil {
		st, err = cl.ExecInteractive(ctx, ref, req, stdin, c.App.Writer, c.App.ErrWriter)
	} else {
		st, err = cl.Exec(ctx, ref, req, c.App.Writer, c.App.ErrWriter)
	}
	if ctx.Err() != nil {
		return interrupted(ctx, err)
	}
	if err != nil {
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
