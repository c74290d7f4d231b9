package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
)

// wsServer serves b's API on a test HTTP server and returns its URL.
func wsServer(t *testing.T, b *backendtest.Fake) string {
	t.Helper()
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

func wsDial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, url+sb+"/exec/ws", nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	return conn
}

func wsSend(t *testing.T, conn *websocket.Conn, typ websocket.MessageType, msg string) {
	t.Helper()
	if err := conn.Write(context.Background(), typ, []byte(msg)); err != nil {
		t.Fatalf("write %q: %v", msg, err)
	}
}

// wsLast reads until the session's last control message and the normal
// closure, and returns that message; binary data is appended to out.
func wsLast(t *testing.T, conn *websocket.Conn, out *strings.Builder) api.ExecWSMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var last api.ExecWSMessage
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != websocket.StatusNormalClosure {
				t.Fatalf("read: %v, want a normal closure", err)
			}
			if last.Type == "" {
				t.Fatal("closed without an exit or error message")
			}
			return last
		}
		if typ == websocket.MessageBinary {
			if out != nil {
				out.Write(data[1:])
			}
			continue
		}
		var m api.ExecWSMessage
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("message %q: %v", data, err)
		}
		if m.Type == api.ExecWSExit || m.Type == api.ExecWSError {
			if last.Type != "" {
				t.Fatalf("a second last message %q after %+v", data, last)
			}
			last = m
		}
	}
}

// TestExecWSUpgradeMatchesDocument: the route's upgrade request and its
// 101 are the document's, and a session runs to its exit message.
func TestExecWSUpgradeMatchesDocument(t *testing.T) {
	doc := loadDoc(t)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	url := wsServer(t, &backendtest.Fake{})
	req, _ := http.NewRequest("GET", "http://localhost"+sb+"/exec/ws", nil) // the document's server
	route, params, err := router.FindRoute(req)
	if err != nil {
		t.Fatalf("no document route: %v", err)
	}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		t.Errorf("request does not match openapi.yaml: %v", err)
	}
	if route.Operation.Responses.Value("101") == nil {
		t.Error("openapi.yaml does not document the 101")
	}

	ctx := context.Background()
	conn, resp, err := websocket.Dial(ctx, url+sb+"/exec/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	wsSend(t, conn, websocket.MessageText, `{"type":"start","exec":{"cmd":["cat"]}}`)
	wsSend(t, conn, websocket.MessageBinary, "\x00hello")
	wsSend(t, conn, websocket.MessageText, `{"type":"stdin_close"}`)
	var out strings.Builder
	last := wsLast(t, conn, &out)
	if last.Type != api.ExecWSExit || last.Exit == nil || last.Exit.ExitCode != 0 || out.String() != "hello" {
		t.Fatalf("last %+v, output %q", last, out.String())
	}
}

// TestExecWSProtocolErrors: every violation ends the session with a 400
// error message that says what was wrong, and the command is killed.
func TestExecWSProtocolErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		msgs  []string // "b:" prefix: binary
		code  string
		want  string
		start bool // the command started (then it must have been killed)
	}{
		{"binary first", []string{"b:\x00x"}, api.CodeBadRequest, "first message must be a text message", false},
		{"not start first", []string{`{"type":"resize","tty":{"rows":1,"cols":1}}`}, api.CodeBadRequest, `the first message must be {"type":"start"`, false},
		{"malformed", []string{`{"type":`}, api.CodeBadRequest, "malformed control message", false},
		{"unknown field", []string{`{"type":"start","exec":{"cmd":["x"]},"exce":1}`}, api.CodeBadRequest, `unknown field "exce"`, false},
		{"stdin_open", []string{`{"type":"start","exec":{"cmd":["x"],"stdin_open":true}}`}, api.CodeInvalidArgument, "stdin_open is for detached processes", false},
		{"unknown type", []string{`{"type":"start","exec":{"cmd":["x"]}}`, `{"type":"resize-now"}`}, api.CodeBadRequest, `unknown control message type "resize-now"`, true},
		{"resize without tty", []string{`{"type":"start","exec":{"cmd":["x"]}}`, `{"type":"resize","tty":{"rows":24,"cols":80}}`}, api.CodeInvalidArgument, "runs without a terminal", true},
		{"resize without size", []string{`{"type":"start","exec":{"cmd":["x"],"tty":{"rows":2,"cols":2}}}`, `{"type":"resize"}`}, api.CodeBadRequest, `a resize message needs "tty"`, true},
		{"resize to zero", []string{`{"type":"start","exec":{"cmd":["x"],"tty":{"rows":2,"cols":2}}}`, `{"type":"resize","tty":{"rows":0,"cols":80}}`}, api.CodeInvalidArgument, "terminal size 0x80", true},
		{"wrong stream", []string{`{"type":"start","exec":{"cmd":["x"]}}`, "b:\x01out"}, api.CodeBadRequest, "stdin stream byte 0", true},
		{"stdin after close", []string{`{"type":"start","exec":{"cmd":["x"]}}`, `{"type":"stdin_close"}`, "b:\x00late"}, api.CodeBadRequest, "stdin data after stdin_close", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &backendtest.Fake{}
			killed := make(chan error, 1)
			b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
				started(&backendtest.Control{ID: "e1", PID: 1, Tty: req.Tty != nil})
				go io.Copy(io.Discard, stdin)
				<-ctx.Done() // runs until killed
				killed <- ctx.Err()
				return api.ExitStatus{}, ctx.Err()
			}
			conn := wsDial(t, wsServer(t, b))
			for _, m := range c.msgs {
				if d, ok := strings.CutPrefix(m, "b:"); ok {
					wsSend(t, conn, websocket.MessageBinary, d)
				} else {
					wsSend(t, conn, websocket.MessageText, m)
				}
			}
			last := wsLast(t, conn, nil)
			if last.Type != api.ExecWSError || last.Error == nil || last.Error.Code != c.code || !strings.Contains(last.Error.Message, c.want) {
				t.Fatalf("last message %+v, want error %s saying %q", last, c.code, c.want)
			}
			if c.start {
				select {
				case err := <-killed:
					if !errors.Is(err, context.Canceled) {
						t.Errorf("the command ended with %v", err)
					}
				case <-time.After(time.Minute):
					t.Fatal("the command was not killed")
				}
			} else if calls := strings.Join(b.Calls(), ","); strings.Contains(calls, "ExecInteractive") {
				t.Errorf("the backend ran a command for a refused start: %s", calls)
			}
		})
	}
}

// TestExecWSClientGone: a client that goes away kills the command.
func TestExecWSClientGone(t *testing.T) {
	b := &backendtest.Fake{}
	killed := make(chan struct{})
	b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started(&backendtest.Control{ID: "e1", PID: 1})
		<-ctx.Done()
		close(killed)
		return api.ExitStatus{}, ctx.Err()
	}
	conn := wsDial(t, wsServer(t, b))
	wsSend(t, conn, websocket.MessageText, `{"type":"start","exec":{"cmd":["sleep"]}}`)
	typ, data, err := conn.Read(context.Background())
	if err != nil || typ != websocket.MessageText || !strings.Contains(string(data), `"started"`) {
		t.Fatalf("first message %q, %v", data, err)
	}
	conn.CloseNow()
	select {
	case <-killed:
	case <-time.After(time.Minute):
		t.Fatal("the command outlived its client")
	}
}

// TestExecWSAuth: on TCP the upgrade needs the bearer token like every
// route.
func TestExecWSAuth(t *testing.T) {
	const token = "0123456789abcdef0123"
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Shutdown(ctx)
	})
	url := "http://" + l.Addr().String() + sb + "/exec/ws"
	_, resp, err := websocket.Dial(context.Background(), url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without a token: %v, %+v", err, resp)
	}
	conn, _, err := websocket.Dial(context.Background(), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + token}}})
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	wsSend(t, conn, websocket.MessageText, `{"type":"start","exec":{"cmd":["cat"]}}`)
	wsSend(t, conn, websocket.MessageText, `{"type":"stdin_close"}`)
	if last := wsLast(t, conn, nil); last.Type != api.ExecWSExit {
		t.Fatalf("last %+v", last)
	}
}

// TestExecWSStdinAfterEnd: stdin the command never reads (it ended, or
// its agent stream stopped taking input) does not keep the session: the
// client gets the exit and the handler ends (Shutdown finds nothing
// running).
func TestExecWSStdinAfterEnd(t *testing.T) {
	b := &backendtest.Fake{}
	b.ExecInteractiveFn = func(ctx context.Context, ref string, req api.ExecRequest, stdin io.Reader, started func(backend.ExecControl), stdout, stderr io.Writer) (api.ExitStatus, error) {
		started(&backendtest.Control{ID: "e1", PID: 1})
		// One byte of the message: the rest stays pending in the
		// session's write of it, and the command ends.
		if _, err := io.ReadFull(stdin, make([]byte, 1)); err != nil {
			return api.ExitStatus{}, err
		}
		return api.ExitStatus{ExitCode: 3}, nil
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	conn := wsDial(t, hs.URL)
	wsSend(t, conn, websocket.MessageText, `{"type":"start","exec":{"cmd":["sh"]}}`)
	if typ, data, err := conn.Read(context.Background()); err != nil || typ != websocket.MessageText || !strings.Contains(string(data), `"started"`) {
		t.Fatalf("first message %q, %v", data, err)
	}
	wsSend(t, conn, websocket.MessageBinary, "\x00ls\r")
	if last := wsLast(t, conn, nil); last.Type != api.ExecWSExit || last.Exit.ExitCode != 3 {
		t.Fatalf("last %+v", last)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v: the session's handler did not end", err)
	}
}
