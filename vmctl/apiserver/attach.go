package apiserver

import (
	"context"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ProcessTerminalBackend is the part of a Backend that resizes detached
// processes' terminals and attaches clients to running detached
// processes; a Backend without it answers those routes 501
// not_implemented.
type ProcessTerminalBackend interface {
	// ResizeProcess sets the size of the process's terminal (size
	// validated) and returns the process. Errors: 404 not_found, 400
	// invalid_argument for a process without a terminal, 409
	// process_exited.
	ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error)
	// AttachProcess connects a client to a detached process until it ends
	// (its exit status) or ctx is done (the client detached: the process
	// runs on, ctx's error is returned). Errors before at.Started: 404
	// not_found; after it, a lost process (503 guest_died) or stdin the
	// process does not take (409 stdin_closed).
	AttachProcess(ctx context.Context, ref, pid string, at ProcessAttachment) (api.ExitStatus, error)
}

// ProcessAttachment is how AttachProcess connects a detached process to
// its client.
type ProcessAttachment struct {
	// Offset is where the output starts, a byte offset in the process's
	// combined output; nil means its current end (new output only).
	Offset *int64
	// Stdin is read until EOF (or ctx's end) and each piece written to
	// the process's stdin as it comes; its EOF leaves the process's stdin
	// open.
	Stdin io.Reader
	// Stdout and Stderr get the output from Offset on, following the
	// process; a slow writer slows this client only.
	Stdout, Stderr io.Writer
	// Started is called once before any output with the process's
	// controls, the process and the offset its output starts at.
	Started func(ctl ExecControl, p api.Process, offset int64)
	// Dropped is called when output from offset on fell out of the
	// guest's ring: n bytes are gone, the output goes on at offset+n.
	Dropped func(offset, n int64)
}

// processTerminals returns the Backend's ProcessTerminalBackend (needs
// checked it).
func (s *Server) processTerminals() ProcessTerminalBackend {
	return s.backend.(ProcessTerminalBackend)
}

func resizeProcess(s *Server, r *request, size api.TtySize) (api.Process, error) {
	return s.processTerminals().ResizeProcess(r.Context(), r.id, r.pid, size)
}

// processWS attaches a WebSocket client to a running detached process
// (GET /v1/sandboxes/{id}/processes/{pid}/ws; the messages are those of
// the interactive exec, with the differences in vmctl/api/attach.go).
// A missing sandbox or process is answered 404 before the upgrade.
func processWS(s *Server, w http.ResponseWriter, r *request) error {
	var offset *int64
	if r.q.Has("offset") {
		n, err := queryInt(r.q, "offset")
		if err != nil {
			return err
		}
		offset = &n
	}
	if _, err := s.backend.GetProcess(r.Context(), r.id, r.pid); err != nil {
		return err
	}
	pt := s.processTerminals()
	return serveWS(s, w, r, "/v1/sandboxes/{id}/processes/{pid}/ws", func(ws *execWSSession, _ context.Context) (wsCommand, error) {
		return func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (api.ExitStatus, error) {
			return pt.AttachProcess(ctx, r.id, r.pid, ProcessAttachment{
				Offset: offset, Stdin: stdin, Stdout: stdout, Stderr: stderr,
				Started: func(c ExecControl, p api.Process, offset int64) {
					ws.start(c, api.ExecWSMessage{Type: api.ExecWSStarted, ExecID: p.ID, Pid: p.Pid, Tty: p.Tty, Offset: offset})
				},
				Dropped: func(offset, n int64) {
					ws.sendJSON(api.ExecWSMessage{Type: api.ExecWSDropped, Offset: offset + n, Dropped: n})
				},
			})
		}, nil
	})
}
