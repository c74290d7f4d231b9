package process

import (
	"context"
	"errors"
	"io"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

var (
	_ Proc         = (*agent.Process)(nil)
	_ AgentStarter = (*agent.Client)(nil)
)

// AgentStarter starts a command in a guest and returns once it runs or
// failed to start, with agent.Client.Start's contract: ctx bounds the
// command's whole life, stdin nil is /dev/null, and the returned
// process's Wait reports how it ended. *agent.Client and *sandbox.Sandbox
// have this method.
type AgentStarter interface {
	Start(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*agent.Process, error)
}

// AgentStart returns the StartFunc that starts commands through c
// (an *agent.Client, or a *sandbox.Sandbox that checks its state first).
func AgentStart(c AgentStarter) StartFunc {
	return func(ctx context.Context, req agentproto.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (Proc, error) {
		p, err := c.Start(ctx, req, stdin, stdout, stderr)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return p, nil
	}
}

// isProcessDone reports whether a Proc.Signal error means the command had
// already ended.
func isProcessDone(err error) bool {
	return errors.Is(err, agent.ErrProcessDone) || errors.Is(err, ErrExited)
}
