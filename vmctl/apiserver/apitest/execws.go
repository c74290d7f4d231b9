package apitest

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
)

// ExecInteractive implements apiserver.Backend; by default it starts (exec
// "e1", pid 7, controls recorded in a *Control), copies stdin to stdout
// until its EOF and exits 0.
func (b *Backend) ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(apiserver.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
	b.record("ExecInteractive", ref)
	if b.ExecInteractiveFn != nil {
		return b.ExecInteractiveFn(ctx, ref, req, stdin, started, stdout, stderr)
	}
	started(&Control{ID: "e1", PID: 7, Tty: req.Tty != nil})
	if _, err := io.Copy(stdout, stdin); err != nil {
		return api.ExitStatus{}, err
	}
	return api.ExitStatus{ExitCode: 0, DurationMs: 5}, nil
}

// Control is a fake apiserver.ExecControl that records what it is asked:
// "resize RxC" and "signal SIG" in Calls. Resize without Tty fails as the
// daemon's does.
type Control struct {
	ID  string
	PID int
	Tty bool

	mu    sync.Mutex
	calls []string
}

var _ apiserver.ExecControl = (*Control)(nil)

// ExecID implements apiserver.ExecControl.
func (c *Control) ExecID() string { return c.ID }

// Pid implements apiserver.ExecControl.
func (c *Control) Pid() int { return c.PID }

// Resize implements apiserver.ExecControl.
func (c *Control) Resize(size api.TtySize) error {
	if err := size.Validate(); err != nil {
		return err
	}
	if !c.Tty {
		return api.Invalidf("exec %s runs without a terminal: only a command started with tty has a size to change", c.ID)
	}
	c.record(fmt.Sprintf("resize %dx%d", size.Rows, size.Cols))
	return nil
}

// Signal implements apiserver.ExecControl.
func (c *Control) Signal(ctx context.Context, signal string) error {
	c.record("signal " + signal)
	return nil
}

func (c *Control) record(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
}

// Calls returns what the control was asked so far.
func (c *Control) Calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.calls...)
}
