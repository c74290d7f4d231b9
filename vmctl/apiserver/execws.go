package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// execWSStartLimit is the most bytes the "start" message may have: a JSON
// body's limit, with room for the base64 of its stdin.
const execWSStartLimit = 2*api.MaxJSONBodyBytes + 1024

// execWS serves the interactive exec (GET /v1/sandboxes/{id}/exec/ws; the
// messages are documented in vmctl/api/execws.go). Before the upgrade,
// errors are ordinary answers (400 for a request that is no WebSocket
// upgrade, answered by its route's webSocket wrapper; 404 for an unknown
// sandbox); after it, they are an "error" message and the handler returns
// nil (the connection is no longer HTTP).
func execWS(s *Server, w http.ResponseWriter, r *request) error {
	if _, err := s.backend.GetSandbox(r.Context(), r.id); err != nil {
		return err
	}
	return serveWS(s, w, r, "/v1/sandboxes/{id}/exec/ws", func(ws *execWSSession, ctx context.Context) (wsCommand, error) {
		req, err := ws.readStart(ctx)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (api.ExitStatus, error) {
			return s.backend.ExecInteractive(ctx, r.id, req, stdin, func(c backend.ExecControl) {
				ws.start(c, api.ExecWSMessage{Type: api.ExecWSStarted, ExecID: c.ExecID(), Pid: c.Pid()})
			}, stdout, stderr)
		}, nil
	})
}

// webSocket wraps the handler h of a WebSocket route: a request that does
// not ask for the upgrade is answered 400 (instead names the route to use
// without one) before h runs, so before anything else happens, such as
// the resume of ?resume=true (resumable goes inside it).
func webSocket(instead string, h handler) handler {
	return func(s *Server, w http.ResponseWriter, r *http.Request, q url.Values) error {
		if !headerHasToken(r.Header, "Connection", "upgrade") || !headerHasToken(r.Header, "Upgrade", "websocket") {
			return badRequest("%s is a WebSocket endpoint: connect with a WebSocket client (Connection: Upgrade, Upgrade: websocket); %s", r.URL.Path, instead)
		}
		return h(s, w, r, q)
	}
}

// serveWS upgrades r to a WebSocket and runs one session on it (route
// names it in logs and errors): prepare reads what the session needs from
// the client and returns the command to run. After the upgrade, errors
// are an "error" message and serveWS returns nil (the connection is no
// longer HTTP).
func serveWS(s *Server, w http.ResponseWriter, r *request, route string, prepare func(ws *execWSSession, ctx context.Context) (wsCommand, error)) error {
	// Cross-origin requests are refused (Accept's default): a web page
	// must not drive a shell in a sandbox with the user's credentials.
	conn, err := websocket.Accept(w, r.Request, nil)
	if err != nil {
		s.log.Debug("WebSocket upgrade refused", "route", r.Pattern, "err", err)
		return nil // Accept answered
	}
	ctx, end := s.hijacked(r.Context())
	defer end()
	newExecWSSession(s, r, conn, route).run(ctx, prepare)
	return nil
}

// wsCommand runs a session's command (an interactive exec, or an attach to
// a detached process) with its stdin and output on the WebSocket; it
// calls the session's start once it runs and returns its exit status.
type wsCommand func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (api.ExitStatus, error)

// headerHasToken reports whether the comma-separated header name contains
// token, case-insensitively.
func headerHasToken(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// execWSSession is one interactive exec, or one attach to a detached
// process, on its WebSocket.
type execWSSession struct {
	s     *Server
	r     *request
	conn  *websocket.Conn
	route string // the route's pattern, for logs and errors

	// stdin is the command's stdin: the reader passes stdin messages
	// through the pipe, which blocks until the command took them.
	stdinR *io.PipeReader
	stdinW *io.PipeWriter

	// ctl is the running command's controls, closed over by started.
	ctl     backend.ExecControl
	started chan struct{}

	// io is the context of the connection's reads and writes: cancelled
	// only when Shutdown gives up waiting (coder/websocket closes the
	// connection when the context of a read or write ends, so the
	// command's context, which a protocol error cancels, must not be it).
	io context.Context
	// failed is the first protocol error of the client (then cancel
	// kills the command); cancel ends the command.
	failOnce sync.Once
	failed   error
	cancel   context.CancelFunc
}

func newExecWSSession(s *Server, r *request, conn *websocket.Conn, route string) *execWSSession {
	pr, pw := io.Pipe()
	return &execWSSession{s: s, r: r, conn: conn, route: route, stdinR: pr, stdinW: pw, started: make(chan struct{})}
}

// run prepares the command (the exec reads its "start" message), runs it
// while a goroutine reads the client's messages, and ends with "exit" or
// "error" and a normal closure.
func (ws *execWSSession) run(ctx context.Context, prepare func(ws *execWSSession, ctx context.Context) (wsCommand, error)) {
	defer ws.conn.CloseNow()
	ws.io = ctx
	ctx, ws.cancel = context.WithCancel(ctx)
	defer ws.cancel()
	defer ws.stdinR.Close() // also when prepare fails

	command, err := prepare(ws, ctx)
	if err != nil {
		ws.finish(ctx, api.ExitStatus{}, err)
		return
	}
	ws.conn.SetReadLimit(api.ExecWSMaxMessage)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		ws.readLoop(ctx)
	}()
	status, err := command(ctx, ws.stdinR, wsOutput{ws, api.ExecWSStdout}, wsOutput{ws, api.ExecWSStderr})
	// Nobody reads stdin any more: a stdin message the read loop is
	// passing on (blocked in the pipe) is dropped, so the loop ends.
	ws.stdinR.Close()
	ws.finish(ctx, status, err)
	ws.cancel()
	ws.conn.CloseNow() // after a normal closure a no-op; else it ends the read loop's read
	<-readDone
}

// start hands over the running command's controls (once, before any
// output) and sends its "started" message.
func (ws *execWSSession) start(c backend.ExecControl, started api.ExecWSMessage) {
	ws.ctl = c
	close(ws.started)
	ws.sendJSON(started)
}

// readStart reads and checks the first message.
func (ws *execWSSession) readStart(ctx context.Context) (api.ExecRequest, error) {
	ws.conn.SetReadLimit(execWSStartLimit)
	typ, data, err := ws.conn.Read(ws.io)
	if err != nil {
		return api.ExecRequest{}, err
	}
	if typ != websocket.MessageText {
		return api.ExecRequest{}, badRequest(`the first message must be a text message {"type":"start","exec":{...}} with the command to run, not binary data`)
	}
	m, err := decodeWSMessage(data)
	if err != nil {
		return api.ExecRequest{}, err
	}
	if m.Type != api.ExecWSStart || m.Exec == nil {
		return api.ExecRequest{}, badRequest(`the first message must be {"type":"start","exec":{...}} with the command to run, not %s`, api.QuoteShort(string(data)))
	}
	if err := m.Exec.Validate(true); err != nil {
		return api.ExecRequest{}, err
	}
	return *m.Exec, nil
}

// decodeWSMessage decodes a control message strictly (unknown fields are
// errors, as in request bodies).
func decodeWSMessage(data []byte) (api.ExecWSMessage, error) {
	var m api.ExecWSMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, badRequest("malformed control message %s: %v", api.QuoteShort(string(data)), err)
	}
	return m, nil
}

// readLoop handles the client's messages after "start" until the session
// ends: stdin into the pipe (blocking while the command does not read),
// stdin_close, resize and signal through the command's controls.
func (ws *execWSSession) readLoop(ctx context.Context) {
	defer ws.stdinW.Close()
	stdinClosed := false
	for {
		typ, data, err := ws.conn.Read(ws.io)
		if err != nil {
			// The client went away (or closed): the command is killed,
			// unless it already ended.
			ws.cancel()
			return
		}
		if typ == websocket.MessageBinary {
			switch {
			case len(data) == 0 || data[0] != api.ExecWSStdin:
				ws.fail(badRequest("a binary message from the client must start with the stdin stream byte 0"))
				return
			case stdinClosed:
				ws.fail(badRequest("stdin data after stdin_close"))
				return
			}
			if _, err := ws.stdinW.Write(data[1:]); err != nil {
				stdinClosed = true // the command's stdin is gone: drop the rest
			}
			continue
		}
		m, err := decodeWSMessage(data)
		if err != nil {
			ws.fail(err)
			return
		}
		switch m.Type {
		case api.ExecWSStdinClose:
			stdinClosed = true
			ws.stdinW.Close()
			continue
		case api.ExecWSResize:
			if m.Tty == nil {
				ws.fail(badRequest(`a resize message needs "tty": {"rows": R, "cols": C}`))
				return
			}
		case api.ExecWSSignal:
		default:
			ws.fail(badRequest("unknown control message type %s: the client sends start, resize, signal or stdin_close", api.QuoteShort(m.Type)))
			return
		}
		select {
		case <-ws.started:
		case <-ctx.Done():
			return
		}
		if m.Type == api.ExecWSResize {
			err = ws.ctl.Resize(*m.Tty)
		} else {
			err = ws.ctl.Signal(ctx, m.Signal)
		}
		if err != nil {
			ws.fail(err)
			return
		}
	}
}

// fail ends the session for a protocol error of the client: the command
// is killed and err becomes the "error" message.
func (ws *execWSSession) fail(err error) {
	ws.failOnce.Do(func() {
		ws.failed = err
		ws.cancel()
	})
}

// finish sends the last message, "exit" or "error", and closes the
// connection normally.
func (ws *execWSSession) finish(ctx context.Context, status api.ExitStatus, err error) {
	ws.failOnce.Do(func() {}) // a later protocol error is moot
	if ws.failed != nil {
		err = ws.failed
	}
	route := ws.route
	switch {
	case err == nil:
		ws.sendJSON(api.ExecWSMessage{Type: api.ExecWSExit, Exit: &status})
	case ws.failed == nil && ctx.Err() != nil:
		// The client went away: nobody reads an answer.
		ws.s.log.Debug("API request abandoned by the client", "route", route, "caller", api.CallerFrom(ctx).ID)
		return
	case isCloseError(err):
		return
	default:
		ws.sendJSON(api.ExecWSMessage{Type: api.ExecWSError, Error: ws.s.apiError(ws.r.Request, route, err)})
	}
	ws.conn.Close(websocket.StatusNormalClosure, "")
}

// isCloseError reports whether err is the client's close frame or a
// broken connection rather than something to tell the client.
func isCloseError(err error) bool {
	var ce websocket.CloseError
	return errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed)
}

// sendJSON writes one control message; errors (the client went away) are
// left to the read loop to notice.
func (ws *execWSSession) sendJSON(m api.ExecWSMessage) {
	b, err := json.Marshal(m)
	if err != nil {
		return
	}
	_ = ws.conn.Write(ws.io, websocket.MessageText, b)
}

// wsOutput is an io.Writer that sends a command's output as binary
// messages of at most api.ExecWSMaxData data bytes on stream. A write
// returns once the message is written to the connection, so a client that
// reads slowly slows the command.
type wsOutput struct {
	ws     *execWSSession
	stream byte
}

func (o wsOutput) Write(p []byte) (int, error) {
	n := 0
	buf := make([]byte, 0, 1+min(len(p), api.ExecWSMaxData))
	for len(p) > 0 {
		c := min(len(p), api.ExecWSMaxData)
		buf = append(append(buf[:0], o.stream), p[:c]...)
		if err := o.ws.conn.Write(o.ws.io, websocket.MessageBinary, buf); err != nil {
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}
