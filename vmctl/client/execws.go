package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/vmctl/api"
)

// InteractiveExec is a command running through the interactive exec, one
// WebSocket that carries its stdin, output, terminal size, signals and
// exit status (Client.StartInteractive; the messages are documented in
// vmctl/api/execws.go). It is safe for concurrent use.
type InteractiveExec struct {
	conn   *websocket.Conn
	path   string
	tty    bool
	execID string
	pid    int

	stdout, stderr io.Writer
	stopCtx        func() bool
	ctx            context.Context

	// attach: a session of an existing detached process (AttachProcess).
	attach    bool
	offset    int64                 // where its output started
	onDropped func(offset, n int64) // a "dropped" message

	once   sync.Once
	done   chan struct{} // closed when status and err are final
	status api.ExitStatus
	err    error
}

// StartInteractive starts req.Cmd in sandbox ref through the interactive
// exec (GET /v1/sandboxes/{id}/exec/ws) and returns once it runs. With
// req.Tty it runs on a terminal of that size (all output on stdout;
// Resize changes the size). A goroutine copies stdin (after req.Stdin)
// to the command as it reads it, in messages of at most api.ExecWSMaxData
// bytes, then ends the command's stdin at EOF; nil stdin ends it at once.
// That goroutine may stay blocked in stdin.Read after the command ended.
// Output goes to stdout and stderr (nil discards) as it arrives: a slow
// writer slows the command, nothing is buffered without bound. ctx bounds
// the command's whole life: when it ends the connection closes and the
// daemon kills the command.
//
// Errors: *api.Error from the daemon before the command started (404,
// 409 sandbox_not_running, 429 exec_limit_reached, 400 for a bad
// request), ErrUnreachable, ctx's.
func (c *processes) StartInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*InteractiveExec, error) {
	e, err := c.dialInteractive(ctx, c.resumable(nil, "v1", "sandboxes", ref, "exec", "ws"), stdout, stderr)
	if err != nil {
		return nil, err
	}
	e.tty = req.Tty != nil
	if err := e.sendJSON(ctx, api.ExecWSMessage{Type: api.ExecWSStart, Exec: &req}); err != nil {
		return nil, e.abort(err)
	}
	return e.untilStarted(stdin)
}

// dialInteractive opens the WebSocket of u for a session whose output
// goes to stdout and stderr (nil discards).
func (c *transport) dialInteractive(ctx context.Context, u *url.URL, stdout, stderr io.Writer) (*InteractiveExec, error) {
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: c.header()})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("GET %s: %w", u.Path, err)
	}
	// Output messages carry at most ExecWSMaxData bytes; control messages
	// are small, but an error message quotes what it refused.
	conn.SetReadLimit(api.ExecWSMaxMessage + 64<<10)
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	e := &InteractiveExec{conn: conn, path: u.Path, stdout: stdout, stderr: stderr, ctx: ctx, done: make(chan struct{})}
	e.stopCtx = context.AfterFunc(ctx, func() { conn.CloseNow() })
	return e, nil
}

// untilStarted reads the session's first messages until "started" (then
// it starts copying stdin and receiving) or its end.
func (e *InteractiveExec) untilStarted(stdin io.Reader) (*InteractiveExec, error) {
	conn, u, ctx := e.conn, e.path, e.ctx
	// Until "started" only output can come (none yet), "exit" of a command
	// that could not start, or "error".
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return nil, e.abort(err)
		}
		if typ == websocket.MessageBinary {
			if err := e.output(data); err != nil {
				return nil, e.abort(err)
			}
			continue
		}
		var m api.ExecWSMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, e.abort(fmt.Errorf("reading %s: malformed message: %w", u, err))
		}
		switch m.Type {
		case api.ExecWSStarted:
			e.execID, e.pid = m.ExecID, m.Pid
			if e.attach {
				e.tty, e.offset = m.Tty != nil, m.Offset
			}
			go e.receive()
			go e.sendStdin(stdin)
			return e, nil
		case api.ExecWSExit: // the command could not start: Wait has its status
			e.end(m)
			return e, nil
		case api.ExecWSError:
			e.end(m)
			return nil, e.err
		}
	}
}

// ExecInteractive is StartInteractive followed by Wait.
func (c *processes) ExecInteractive(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (api.ExitStatus, error) {
	e, err := c.StartInteractive(ctx, ref, req, stdin, stdout, stderr)
	if err != nil {
		return api.ExitStatus{}, err
	}
	return e.Wait()
}

// ExecID returns the exec's ID in the sandbox's history and audit log.
func (e *InteractiveExec) ExecID() string { return e.execID }

// Pid returns the guest process id of the command.
func (e *InteractiveExec) Pid() int { return e.pid }

// Resize sets the size of the command's terminal. Errors: a 400
// invalid_argument *api.Error when the command was started without a
// terminal (req.Tty nil) or the size is out of range; the connection's.
func (e *InteractiveExec) Resize(ctx context.Context, size api.TtySize) error {
	if !e.tty {
		return api.Invalidf("resize: the command was started without a terminal (tty): only a command with a terminal has a size to change")
	}
	if err := size.Validate(); err != nil {
		return err
	}
	return e.sendJSON(ctx, api.ExecWSMessage{Type: api.ExecWSResize, Tty: &size})
}

// Signal sends signal (a name like "INT" or a number) to the command's
// process group. An unknown signal ends the session with a 400 error
// (Wait returns it).
func (e *InteractiveExec) Signal(ctx context.Context, signal string) error {
	return e.sendJSON(ctx, api.ExecWSMessage{Type: api.ExecWSSignal, Signal: signal})
}

// Done is closed when the session has ended (Wait returns at once).
func (e *InteractiveExec) Done() <-chan struct{} { return e.done }

// Wait waits for the command's end and returns its exit status. Errors:
// *api.Error of an "error" message (e.g. 503 guest_died, or 400 for a
// protocol error of ours), ctx's when it ended first, a connection cut
// before the exit status (errExecCut).
func (e *InteractiveExec) Wait() (api.ExitStatus, error) {
	<-e.done
	return e.status, e.err
}

// receive reads the daemon's messages until the exit status.
func (e *InteractiveExec) receive() {
	for {
		typ, data, err := e.conn.Read(e.ctx)
		if err != nil {
			e.abort(err)
			return
		}
		if typ == websocket.MessageBinary {
			if err := e.output(data); err != nil {
				e.abort(err)
				return
			}
			continue
		}
		var m api.ExecWSMessage
		if err := json.Unmarshal(data, &m); err != nil {
			e.abort(fmt.Errorf("reading %s: malformed message: %w", e.path, err))
			return
		}
		if m.Type == api.ExecWSExit || m.Type == api.ExecWSError {
			e.end(m)
			return
		}
		if m.Type == api.ExecWSDropped && e.onDropped != nil {
			e.onDropped(m.Offset-m.Dropped, m.Dropped)
		}
	}
}

// output writes one binary message's data to its stream.
func (e *InteractiveExec) output(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	w := e.stdout
	switch data[0] {
	case api.ExecWSStdout:
	case api.ExecWSStderr:
		w = e.stderr
	default:
		return nil // a stream of a later API version
	}
	if _, err := w.Write(data[1:]); err != nil {
		return fmt.Errorf("writing the command's output: %w", err)
	}
	return nil
}

// sendStdin copies stdin as stdin messages, then stdin_close.
func (e *InteractiveExec) sendStdin(stdin io.Reader) {
	if stdin != nil {
		buf := make([]byte, 1+api.ExecWSMaxData)
		buf[0] = api.ExecWSStdin
		for {
			n, err := stdin.Read(buf[1:])
			if n > 0 {
				if e.conn.Write(e.ctx, websocket.MessageBinary, buf[:1+n]) != nil {
					return // the session ended
				}
			}
			if err != nil {
				break // EOF or a read error: either way the command sees the end
			}
		}
	}
	// An attached client's stdin_close would end only its own input; the
	// process's stdin stays open for the next one anyway.
	if e.attach {
		return
	}
	_ = e.sendJSON(e.ctx, api.ExecWSMessage{Type: api.ExecWSStdinClose})
}

// sendJSON writes one control message. ctx only gates the send: the
// write itself runs under the session's context, since coder/websocket
// closes the connection when a write's context ends.
func (e *InteractiveExec) sendJSON(ctx context.Context, m api.ExecWSMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := e.conn.Write(e.ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("%s: %w", e.path, err)
	}
	return nil
}

// end finishes with the last message and closes the connection.
func (e *InteractiveExec) end(m api.ExecWSMessage) {
	switch {
	case m.Type == api.ExecWSExit && m.Exit != nil:
		e.finish(*m.Exit, nil)
	case m.Type == api.ExecWSExit:
		e.finish(api.ExitStatus{}, fmt.Errorf("reading %s: an exit message without its status", e.path))
	default:
		e.finish(api.ExitStatus{}, streamError(m.Error, e.path))
	}
	e.conn.Close(websocket.StatusNormalClosure, "")
}

// abort finishes with err (ctx's when it ended, a cut connection as
// errExecCut) and returns the final error.
func (e *InteractiveExec) abort(err error) error {
	var ce websocket.CloseError
	switch {
	case e.ctx.Err() != nil:
		err = e.ctx.Err()
	case errors.As(err, &ce), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("%w (reading %s: %w)", errExecCut, e.path, err)
	}
	e.finish(api.ExitStatus{}, err)
	e.conn.CloseNow()
	<-e.done
	return e.err
}

// finish records the final status once.
func (e *InteractiveExec) finish(st api.ExitStatus, err error) {
	e.once.Do(func() {
		e.stopCtx()
		e.status, e.err = st, err
		close(e.done)
	})
}
