package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
)

// errExecCut is the error of an exec stream that ended without the
// command's exit status.
var errExecCut = errors.New("daemon closed the exec stream before the command's exit status")

// processes holds the Client's calls that run commands in a sandbox: the
// streamed exec, detached processes (start, list, output, stdin, kill,
// resize, attach), the interactive exec and the exec history.
type processes struct{ *transport }

// Exec runs req.Cmd in sandbox ref, streaming its output to stdout and
// stderr (nil discards) as it arrives, and returns its exit status.
// Cancelling ctx aborts the request; the daemon then kills the command.
// Errors: *api.Error from the daemon, before the command started (400,
// 404, 409 sandbox_not_running, 429 exec_limit_reached) or after it (an
// "error" event: 503 guest_died); a write error of stdout/stderr (the
// request is aborted); a stream cut before the exit status.
func (c *processes) Exec(ctx context.Context, ref string, req api.ExecRequest, stdout, stderr io.Writer) (api.ExitStatus, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.ExitStatus{}, err
	}
	u := c.resumable(nil, "v1", "sandboxes", ref, "exec")
	resp, err := c.do(ctx, http.MethodPost, u, api.ContentTypeJSON, bytes.NewReader(body))
	if err != nil {
		return api.ExitStatus{}, err
	}
	defer resp.Body.Close()
	if err := checkType(resp, api.ContentTypeNDJSON); err != nil {
		return api.ExitStatus{}, err
	}
	exit, err := readEvents(ctx, resp.Body, u.Path, stdout, stderr)
	if err != nil {
		return api.ExitStatus{}, err
	}
	if exit == nil {
		return api.ExitStatus{}, errExecCut
	}
	return *exit, nil
}

// readEvents copies stdout/stderr events to their writers until an exit
// event (its status returned), an error event (its *api.Error) or the
// stream's clean end (nil, nil).
func readEvents(ctx context.Context, body io.Reader, path string, stdout, stderr io.Writer) (*api.ExitStatus, error) {
	dec := json.NewDecoder(body)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if err == io.EOF {
				return nil, nil
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%w (reading %s: %w)", errExecCut, path, err)
			}
			return nil, fmt.Errorf("reading the output stream of %s: %w", path, err)
		}
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			w := stdout
			if ev.Type == api.EventStderr {
				w = stderr
			}
			if w == nil {
				continue
			}
			if _, err := w.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("writing the command's %s: %w", ev.Type, err)
			}
		case api.EventExit:
			if ev.Exit == nil {
				return nil, fmt.Errorf("reading %s: an exit event without its status", path)
			}
			return ev.Exit, nil
		case api.EventError:
			return nil, streamError(ev.Error, path)
		}
		// "started" and types of later API versions need nothing here.
	}
}

// StartProcess starts req.Cmd detached in sandbox ref and returns at once
// (POST .../processes). With req.StdinOpen, WriteStdin feeds it later.
func (c *processes) StartProcess(ctx context.Context, ref string, req api.ExecRequest) (api.Process, error) {
	var p api.Process
	err := c.call(ctx, http.MethodPost, c.resumable(nil, "v1", "sandboxes", ref, "processes"), req, &p)
	return p, err
}

// ListProcesses lists sandbox ref's detached processes, oldest first.
func (c *processes) ListProcesses(ctx context.Context, ref string) ([]api.Process, error) {
	var list api.ProcessList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", ref, "processes"), nil, &list)
	return list.Processes, err
}

// GetProcess returns detached process pid of sandbox ref. Errors: 404.
func (c *processes) GetProcess(ctx context.Context, ref, pid string) (api.Process, error) {
	var p api.Process
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "sandboxes", ref, "processes", pid), nil, &p)
	return p, err
}

// ProcessOutput copies a detached process's output from byte offset on
// (offsets count stdout and stderr together) to stdout and stderr (nil
// discards). Without follow it returns once the buffered output is sent;
// with follow it waits for more until the process ends or ctx is done.
// The status is nil when the process had not ended (or the daemon ended
// the stream while shutting down: resume from the offset reached). Errors:
// 404, 410 output_dropped (offset older than the daemon's buffer).
func (c *processes) ProcessOutput(ctx context.Context, ref, pid string, offset int64, follow bool, stdout, stderr io.Writer) (*api.ExitStatus, error) {
	q := url.Values{}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if follow {
		q.Set("follow", "true")
	}
	u := c.endpoint(q, "v1", "sandboxes", ref, "processes", pid, "output")
	resp, err := c.do(ctx, http.MethodGet, u, "", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := checkType(resp, api.ContentTypeNDJSON); err != nil {
		return nil, err
	}
	return readEvents(ctx, resp.Body, u.Path, stdout, stderr)
}

// WriteStdin streams r to a detached process's stdin (no size limit) and
// closes the stdin after when closeAfter; it returns the bytes the
// process got. Errors: 409 stdin_closed, 409 process_exited.
func (c *processes) WriteStdin(ctx context.Context, ref, pid string, r io.Reader, closeAfter bool) (int64, error) {
	var q url.Values
	if closeAfter {
		q = url.Values{"close": {"true"}}
	}
	if r == nil {
		r = http.NoBody
	}
	resp, err := c.do(ctx, http.MethodPost, c.resumable(q, "v1", "sandboxes", ref, "processes", pid, "stdin"), api.ContentTypeOctetStream, r)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var res api.StdinResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return 0, fmt.Errorf("decoding the stdin answer: %w", err)
	}
	return res.Bytes, nil
}

// KillProcess sends signal (a name such as "TERM" or a number; "" means
// KILL) to a detached process's process group.
func (c *processes) KillProcess(ctx context.Context, ref, pid, signal string) error {
	return c.call(ctx, http.MethodPost, c.resumable(nil, "v1", "sandboxes", ref, "processes", pid, "kill"), api.KillRequest{Signal: signal}, nil)
}

// ExecHistory returns sandbox ref's exec history from the daemon's store,
// oldest first; the newest limit entries when limit > 0. Errors: 404.
func (c *processes) ExecHistory(ctx context.Context, ref string, limit int) ([]api.ExecRecord, error) {
	var q url.Values
	if limit > 0 {
		q = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var list api.ExecList
	err := c.call(ctx, http.MethodGet, c.endpoint(q, "v1", "sandboxes", ref, "execs"), nil, &list)
	return list.Execs, err
}
