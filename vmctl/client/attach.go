package client

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// ErrDetached is what Wait returns after Detach: the process runs on.
var ErrDetached = errdefs.New(errdefs.ErrCanceled, "", "detached from the process; it runs on")

// ResizeProcess sets the terminal size of detached process pid (started
// with ExecRequest.Tty) and returns the process with its new size.
// Errors: 400 invalid_argument for a process without a terminal or a size
// out of range, 404, 409 process_exited.
func (c *processes) ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error) {
	var p api.Process
	err := c.call(ctx, http.MethodPost, c.endpoint(nil, "v1", "sandboxes", ref, "processes", pid, "resize"), size, &p)
	return p, err
}

// AttachOptions configures AttachProcess.
type AttachOptions struct {
	// Offset is where the output starts, a byte offset in the process's
	// combined output; nil means its current end (new output only).
	Offset *int64
	// OnDropped, if set, is called (from the receiving goroutine) when n
	// bytes of output from offset on fell out of the guest's ring and
	// will not come; the output goes on at offset+n.
	OnDropped func(offset, n int64)
}

// AttachProcess attaches to detached process pid of sandbox ref over one
// WebSocket (GET /v1/sandboxes/{id}/processes/{pid}/ws; messages as in
// vmctl/api/attach.go) and returns once attached: its output from
// opts.Offset on goes to stdout and stderr (nil discards) as it comes, a
// goroutine copies stdin (nil: none) to the process's stdin as it reads
// it (its EOF leaves the process's stdin open), Resize and Signal act on
// the process. Wait returns its exit status when it ends; Detach (or
// ctx's end) leaves it running. InteractiveExec.Tty says whether it has a
// terminal, Offset where the output started.
//
// Errors: *api.Error (404 for a missing sandbox or process, 400), the
// connection's, ctx's.
func (c *processes) AttachProcess(ctx context.Context, ref, pid string, opts AttachOptions, stdin io.Reader, stdout, stderr io.Writer) (*InteractiveExec, error) {
	var q url.Values
	if opts.Offset != nil {
		q = url.Values{"offset": {strconv.FormatInt(*opts.Offset, 10)}}
	}
	e, err := c.dialInteractive(ctx, c.resumable(q, "v1", "sandboxes", ref, "processes", pid, "ws"), stdout, stderr)
	if err != nil {
		return nil, err
	}
	e.attach, e.onDropped = true, opts.OnDropped
	return e.untilStarted(stdin)
}

// Tty reports whether the command has a terminal (for an attached
// process: as the daemon said when attaching).
func (e *InteractiveExec) Tty() bool { return e.tty }

// Offset returns, for an attached process, the offset in its combined
// output where the output written to stdout and stderr began.
func (e *InteractiveExec) Offset() int64 { return e.offset }

// Detach ends an attached session and leaves the process running; Wait
// then returns ErrDetached (unless the session had ended already). On an
// interactive exec it ends the session, and the daemon kills the command.
func (e *InteractiveExec) Detach() {
	e.finish(api.ExitStatus{}, ErrDetached)
	e.conn.Close(websocket.StatusNormalClosure, "detach")
}
