package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ErrProcessLost: the detached process ended without an exit status (its
// output stream ended with the process lost, e.g. a daemon restart or the
// guest's death).
var ErrProcessLost = errors.New("lost before it ended (daemon restart or guest death)")

// KillError is joined to ExecWithStdin's error when killing the process
// failed: the process may still run.
type KillError struct {
	// Process is the detached process's ID.
	Process string
	// Err is the KillProcess error.
	Err error
}

// Error implements error.
func (e *KillError) Error() string { return fmt.Sprintf("kill process %s: %v", e.Process, e.Err) }

// Unwrap returns the KillProcess error.
func (e *KillError) Unwrap() error { return e.Err }

// startTimeout bounds ExecWithStdin's start of the process, which is not
// cancelled with ctx.
const startTimeout = time.Minute

// killTimeout bounds ExecWithStdin's kill of the process.
const killTimeout = 30 * time.Second

// ExecWithStdin runs req.Cmd in sandbox ref with stdin as its stdin,
// streamed (an attached Exec sends stdin in its request body, whole): it
// starts a detached process with open stdin, copies stdin into it (closing
// it at EOF) while following its output to stdout and stderr, and returns
// its exit status. The start is not cancelled with ctx (a process started
// as ctx ends must be known, to be killed; it is bounded by a minute).
//
// Errors: StartProcess's and ProcessOutput's; when ctx ends the process is
// killed and the error wraps ctx.Err(); when stdin cannot be delivered to
// the running process it is killed too ("stdin of process ID: ...; the
// process was killed"), so it cannot wait forever; ErrProcessLost. A
// failed kill joins a *KillError.
func (c *Client) ExecWithStdin(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (api.ExitStatus, error) {
	req.StdinOpen = true
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
	p, err := c.StartProcess(sctx, ref, req)
	cancel()
	if err != nil {
		return api.ExitStatus{}, err
	}
	kill := func(err error) error {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		defer cancel()
		if kerr := c.KillProcess(kctx, ref, p.ID, "KILL"); kerr != nil && !api.HasCode(kerr, api.CodeProcessExited) {
			return errors.Join(err, &KillError{Process: p.ID, Err: kerr})
		}
		return err
	}

	if ctx.Err() != nil {
		return api.ExitStatus{}, kill(fmt.Errorf("process %s: %w", p.ID, ctx.Err()))
	}
	outCtx, cancelOut := context.WithCancel(ctx)
	defer cancelOut()
	stdinErr := make(chan error, 1)
	go func() {
		_, err := c.WriteStdin(outCtx, ref, p.ID, stdin, true)
		if err == nil || outCtx.Err() != nil || api.HasCode(err, api.CodeProcessExited) || api.HasCode(err, api.CodeStdinClosed) {
			return
		}
		// A process that ended while we wrote (head -1) may break the
		// upload in other ways; only a live process lacks its stdin.
		if p, perr := c.GetProcess(outCtx, ref, p.ID); perr == nil && p.State != api.ProcessRunning {
			return
		}
		stdinErr <- err
		cancelOut()
	}()
	st, err := c.ProcessOutput(outCtx, ref, p.ID, 0, true, stdout, stderr)
	switch {
	case ctx.Err() != nil:
		if err != nil && !errors.Is(err, ctx.Err()) {
			return api.ExitStatus{}, kill(fmt.Errorf("process %s: %w (%w)", p.ID, ctx.Err(), err))
		}
		return api.ExitStatus{}, kill(fmt.Errorf("process %s: %w", p.ID, ctx.Err()))
	case outCtx.Err() != nil:
		return api.ExitStatus{}, kill(fmt.Errorf("stdin of process %s: %w; the process was killed", p.ID, <-stdinErr))
	case err != nil:
		return api.ExitStatus{}, err
	case st == nil:
		return api.ExitStatus{}, fmt.Errorf("process %s was %w", p.ID, ErrProcessLost)
	}
	return *st, nil
}
