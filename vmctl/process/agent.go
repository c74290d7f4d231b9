package process

import (
	"context"
	"errors"
	"io"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
)

var _ Proc = (*agent.Process)(nil)

// AgentStart returns the StartFunc that starts commands in the guest
// through c (agent.Client.Start).
func AgentStart(c *agent.Client) StartFunc {
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
