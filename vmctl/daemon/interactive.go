package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ExecInteractive implements backend.Backend: an attached command whose
// stdin streams from stdin, through the same path as Exec (execAttached).
func (s *execService) ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
	return s.execAttached(ctx, ref, req, attachment{stdin: stdin, stdout: stdout, stderr: stderr, started: func(id string, p *agent.Process, rec *audit.TtyRecorder) {
		started(&execControl{id: id, p: p, rec: rec})
	}})
}

// execControl is backend.ExecControl on the agent's process.
type execControl struct {
	id  string
	p   *agent.Process
	rec *audit.TtyRecorder // nil without a terminal
}

var _ backend.ExecControl = (*execControl)(nil)

func (c *execControl) ExecID() string { return c.id }
func (c *execControl) Pid() int       { return c.p.Pid() }

// Resize implements backend.ExecControl; the new size is recorded in the
// session's audit.
func (c *execControl) Resize(size api.TtySize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	if !c.p.Tty() {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("exec %s runs without a terminal: only a command started with tty has a size to change", c.id))
	}
	err := c.p.Resize(agentproto.TtySize{Rows: uint16(size.Rows), Cols: uint16(size.Cols)})
	switch {
	case errors.Is(err, agent.ErrProcessDone):
		return nil
	case err != nil:
		return err
	}
	c.rec.Resize(size.Rows, size.Cols)
	return nil
}

// Signal implements backend.ExecControl.
func (c *execControl) Signal(ctx context.Context, signal string) error {
	if signal == "" {
		return errdefs.ErrInvalidArgument.WithMessage("signal is empty: give a name like INT or TERM, or a number 1-64")
	}
	sig, err := parseSignal(signal)
	if err != nil {
		return err
	}
	if err := c.p.Signal(ctx, sig); err != nil && !errors.Is(err, agent.ErrProcessDone) {
		return err
	}
	return nil
}
