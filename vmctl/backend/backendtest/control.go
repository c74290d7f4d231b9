package backendtest

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// ExecInteractive implements backend.Backend; by default it starts (exec
// "e1", pid 7, controls recorded in a *Control), copies stdin to stdout
// until its EOF and exits 0.
func (b *Fake) ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
	b.record("ExecInteractive", ref)
	if b.ExecInteractiveFn != nil {
		return b.ExecInteractiveFn(ctx, ref, req, stdin, started, stdout, stderr)
	}
	if b.Memory != nil {
		return b.Memory.execInteractive(ctx, ref, req, stdin, started, stdout, stderr)
	}
	started(&Control{ID: "e1", PID: 7, Tty: req.Tty != nil})
	if _, err := io.Copy(stdout, stdin); err != nil {
		return api.ExitStatus{}, err
	}
	return api.ExitStatus{ExitCode: 0, DurationMs: 5}, nil
}

// Control is a fake backend.ExecControl that records what it is asked:
// "resize RxC" and "signal SIG" in Calls. Resize without Tty fails as the
// daemon's does.
type Control struct {
	ID  string
	PID int
	Tty bool

	mu    sync.Mutex
	calls []string
}

var _ backend.ExecControl = (*Control)(nil)

// ExecID implements backend.ExecControl.
func (c *Control) ExecID() string { return c.ID }

// Pid implements backend.ExecControl.
func (c *Control) Pid() int { return c.PID }

// Resize implements backend.ExecControl.
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

// Signal implements backend.ExecControl.
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
