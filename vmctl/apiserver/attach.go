package apiserver

import (
	"context"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// processTerminals returns the Backend's backend.ProcessTerminalBackend (needs
// checked it).
func (s *Server) processTerminals() backend.ProcessTerminalBackend {
	return s.backend.(backend.ProcessTerminalBackend)
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
			return pt.AttachProcess(ctx, r.id, r.pid, backend.ProcessAttachment{
				Offset: offset, Stdin: stdin, Stdout: stdout, Stderr: stderr,
				Started: func(c backend.ExecControl, p api.Process, offset int64) {
					ws.start(c, api.ExecWSMessage{Type: api.ExecWSStarted, ExecID: p.ID, Pid: p.Pid, Tty: p.Tty, Offset: offset})
				},
				Dropped: func(offset, n int64) {
					ws.sendJSON(api.ExecWSMessage{Type: api.ExecWSDropped, Offset: offset + n, Dropped: n})
				},
			})
		}, nil
	})
}
