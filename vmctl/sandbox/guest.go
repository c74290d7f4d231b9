package sandbox

import (
	"context"
	"io"
	"io/fs"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

// This file is the sandbox's guest-facing API: commands and file
// operations go through the agent connection here (callers never hold the
// agent client). None of it does accounting (account.go).

// agentFor returns the agent connection of a running sandbox, or the
// ErrNotRunning error saying why there is none.
func (sb *Sandbox) agentFor() (*agent.Client, error) {
	c := sb.Agent()
	if c == nil {
		return nil, sb.NotRunning()
	}
	return c, nil
}

// explain is Explain unless ctx ended (then the caller's cancellation is
// the reason, not the guest).
func (sb *Sandbox) explain(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		return sb.Explain(err)
	}
	return err
}

// Exec runs a command in the sandbox through the guest agent, streaming its
// stdin, stdout and stderr (see agent.Client.Exec). It fails with
// ErrNotRunning unless the sandbox is running. If the guest dies while the
// command runs, the error wraps ErrGuestDied with the console's last lines
// instead of a bare connection error. It does no accounting (BeginExec).
func (sb *Sandbox) Exec(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (agentproto.ExitStatus, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.ExitStatus{Code: -1}, err
	}
	st, err := c.Exec(ctx, req, stdin, stdout, stderr)
	return st, sb.explain(ctx, err)
}

// Start starts a command in the sandbox and returns once it runs or
// failed to start (agent.Client.Start: Wait reports how it ended); ctx
// bounds the command's whole life. process.AgentStart makes a
// process.StartFunc of it. Errors: ErrNotRunning; the agent's as they are, for
// the caller to pass to Explain with Wait's (it may wrap both in its own).
// It does no accounting (BeginExec).
func (sb *Sandbox) Start(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*agent.Process, error) {
	c, err := sb.agentFor()
	if err != nil {
		return nil, err
	}
	return c.Start(ctx, req, stdin, stdout, stderr)
}

// WriteFile writes r to the guest file p with mode perm, atomically
// (temporary file, fsync, rename); parents makes missing parent
// directories; owner (a guest account name or uid, "" for the agent's
// default user) owns the file and the directories made. Errors:
// ErrNotRunning; the agent's, explained.
func (sb *Sandbox) WriteFile(ctx context.Context, p string, r io.Reader, perm fs.FileMode, parents bool, owner string) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	opts := []agent.WriteOption{agent.WithOwner(owner)}
	if parents {
		opts = append(opts, agent.WithParents())
	}
	return sb.explain(ctx, c.WriteFile(ctx, p, r, perm, opts...))
}

// ReadFile copies the guest file p to w. Errors: ErrNotRunning; the
// agent's, explained.
func (sb *Sandbox) ReadFile(ctx context.Context, p string, w io.Writer) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return sb.explain(ctx, c.ReadFile(ctx, p, w))
}

// Stat describes the guest path p (not following a final symlink, as the
// agent's Stat). Errors: ErrNotRunning; the agent's, explained.
func (sb *Sandbox) Stat(ctx context.Context, p string) (agentproto.FileInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	fi, err := c.Stat(ctx, p)
	return fi, sb.explain(ctx, err)
}

// ReadDir lists the guest directory p. Errors: ErrNotRunning; the
// agent's, explained.
func (sb *Sandbox) ReadDir(ctx context.Context, p string) ([]agentproto.FileInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return nil, err
	}
	entries, err := c.List(ctx, p)
	return entries, sb.explain(ctx, err)
}

// Mkdir makes the guest directory req.Path (see agentproto.MkdirRequest).
// Errors: ErrNotRunning; the agent's, explained.
func (sb *Sandbox) Mkdir(ctx context.Context, req agentproto.MkdirRequest) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return sb.explain(ctx, c.Mkdir(ctx, req))
}

// Move renames the guest path req.Source to req.Destination and returns
// the destination's info. Errors: ErrNotRunning; the agent's, explained.
func (sb *Sandbox) Move(ctx context.Context, req agentproto.MoveRequest) (agentproto.FileInfo, error) {
	c, err := sb.agentFor()
	if err != nil {
		return agentproto.FileInfo{}, err
	}
	fi, err := c.Move(ctx, req)
	return fi, sb.explain(ctx, err)
}

// RemoveFile removes the guest path p (a directory's content too with
// recursive). Errors: ErrNotRunning; the agent's, explained.
func (sb *Sandbox) RemoveFile(ctx context.Context, p string, recursive bool) error {
	c, err := sb.agentFor()
	if err != nil {
		return err
	}
	return sb.explain(ctx, c.Remove(ctx, p, recursive))
}
