package apiserver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// attachSuccessCases cover the process terminal routes but the WebSocket
// (see successCases; TestProcessWS covers it).
func attachSuccessCases() []apiCase {
	return []apiCase{
		{name: "resize process", method: "POST", target: sb + "/processes/p1/resize", ct: "json", body: `{"rows":50,"cols":132}`, status: 200, called: true,
			check: func(t *testing.T, rec *httptest.ResponseRecorder) {
				var p api.Process
				if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Tty == nil || *p.Tty != (api.TtySize{Rows: 50, Cols: 132}) {
					t.Errorf("answer %s: %v", rec.Body, err)
				}
			}},
	}
}

// TestProcessTerminalRouteErrors: a bad size, offset or upgrade is refused
// before the backend; a missing process is 404 before the upgrade; the
// backend's refusal to resize a process without a terminal stays 400.
func TestProcessTerminalRouteErrors(t *testing.T) {
	notFound := func(b *backendtest.Fake) {
		b.GetProcessFn = func(context.Context, string, string) (api.Process, error) {
			return api.Process{}, api.Errorf(404, api.CodeNotFound, "process p9: process not found")
		}
	}
	upgrade := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	cases := []struct {
		name, method, target, body string
		header                     http.Header
		setup                      func(b *backendtest.Fake)
		status                     int
		code, msg                  string
		called                     bool
	}{
		{"rows 0", "POST", sb + "/processes/p1/resize", `{"rows":0,"cols":80}`, nil, nil, 400, api.CodeInvalidArgument, "both must be 1-65535", false},
		{"cols too big", "POST", sb + "/processes/p1/resize", `{"rows":24,"cols":65536}`, nil, nil, 400, api.CodeInvalidArgument, "both must be 1-65535", false},
		{"size missing", "POST", sb + "/processes/p1/resize", `{}`, nil, nil, 400, api.CodeInvalidArgument, "", false},
		{"no terminal", "POST", sb + "/processes/p1/resize", `{"rows":24,"cols":80}`, nil, func(b *backendtest.Fake) {
			b.Terminals.ResizeFn = func(context.Context, string, string, api.TtySize) (api.Process, error) {
				return api.Process{}, api.Invalidf("process p1: process has no terminal: only a process started with a terminal has a size to change")
			}
		}, 400, api.CodeInvalidArgument, "has no terminal", true},
		{"ws without upgrade", "GET", sb + "/processes/p1/ws", "", nil, nil, 400, api.CodeBadRequest, "is a WebSocket endpoint", false},
		{"ws bad offset", "GET", sb + "/processes/p1/ws?offset=-1", "", upgrade, nil, 400, api.CodeBadRequest, "offset", false},
		{"ws unknown parameter", "GET", sb + "/processes/p1/ws?follow=1", "", upgrade, nil, 400, api.CodeBadRequest, "follow", false},
		{"ws missing process", "GET", sb + "/processes/p9/ws", "", upgrade, notFound, 404, api.CodeNotFound, "process p9", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := &backendtest.Fake{}
			if c.setup != nil {
				c.setup(b)
			}
			srv, err := apiserver.NewServer(apiserver.Config{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(c.method, "http://localhost"+c.target, strings.NewReader(c.body))
			if c.body != "" {
				r.Header.Set("Content-Type", "application/json")
			}
			for k, v := range c.header {
				r.Header[k] = v
			}
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, r)
			var er api.ErrorResponse
			if err := json.Unmarshal(rec.Body.Bytes(), &er); err != nil {
				t.Fatalf("status %d, answer %q: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != c.status || er.Error.Code != c.code || !strings.Contains(er.Error.Message, c.msg) {
				t.Fatalf("status %d %+v, want %d %s with %q", rec.Code, er.Error, c.status, c.code, c.msg)
			}
			calls := strings.Join(b.Calls(), ",")
			if c.called != (calls != "") || strings.Contains(calls, "AttachProcess") {
				t.Fatalf("backend calls %q, want called = %v and no attach", calls, c.called)
			}
		})
	}
}

// wsRead reads the next message: a control message, or binary data
// (returned with Type "binary" and the data in Signal).
func wsRead(t *testing.T, conn *websocket.Conn) api.ExecWSMessage {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	typ, data, err := conn.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if typ == websocket.MessageBinary {
		return api.ExecWSMessage{Type: "binary", Signal: string(data)}
	}
	var m api.ExecWSMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("message %q: %v", data, err)
	}
	return m
}

// TestProcessWS: the attach WebSocket matches the document; "started"
// carries the process, its terminal and the offset; output, a dropped
// range, stdin, resize and signal pass; the process's end is "exit".
func TestProcessWS(t *testing.T) {
	doc := loadDoc(t)
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "http://localhost"+sb+"/processes/p1/ws?offset=5", nil)
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

	b := &backendtest.Fake{}
	ctl := &backendtest.Control{ID: "p1", PID: 42, Tty: true}
	stdinGot := make(chan string, 1)
	b.Terminals.AttachFn = func(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
		if ref != backendtest.SandboxID || pid != "p1" || at.Offset == nil || *at.Offset != 5 {
			t.Errorf("AttachProcess(%s, %s, offset %v)", ref, pid, at.Offset)
		}
		p := backendtest.Process("p1")
		p.Tty = &api.TtySize{Rows: 24, Cols: 80}
		at.Started(ctl, p, 5)
		at.Stdout.Write([]byte("abc"))
		at.Dropped(8, 100)
		at.Stdout.Write([]byte("$ "))
		buf := make([]byte, 16)
		n, _ := at.Stdin.Read(buf)
		stdinGot <- string(buf[:n])
		at.Stdout.Write([]byte("ls\r\n"))
		return api.ExitStatus{ExitCode: 3, DurationMs: 9}, nil
	}
	ctx := context.Background()
	conn, resp, err := websocket.Dial(ctx, wsServer(t, b)+sb+"/processes/p1/ws?offset=5", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("status %d", resp.StatusCode)
	}
	want := []api.ExecWSMessage{
		{Type: api.ExecWSStarted, ExecID: "p1", Pid: 42, Tty: &api.TtySize{Rows: 24, Cols: 80}, Offset: 5},
		{Type: "binary", Signal: "\x01abc"},
		{Type: api.ExecWSDropped, Offset: 108, Dropped: 100},
		{Type: "binary", Signal: "\x01$ "},
	}
	for _, w := range want {
		if m := wsRead(t, conn); !reflect.DeepEqual(m, w) {
			t.Fatalf("message %+v (tty %v), want %+v", m, m.Tty, w)
		}
	}
	wsSend(t, conn, websocket.MessageText, `{"type":"resize","tty":{"rows":50,"cols":132}}`)
	wsSend(t, conn, websocket.MessageText, `{"type":"signal","signal":"INT"}`)
	wsSend(t, conn, websocket.MessageBinary, "\x00ls\r")
	if got := <-stdinGot; got != "ls\r" {
		t.Fatalf("stdin %q", got)
	}
	var out strings.Builder
	last := wsLast(t, conn, &out)
	if last.Type != api.ExecWSExit || last.Exit == nil || last.Exit.ExitCode != 3 || out.String() != "ls\r\n" {
		t.Fatalf("last %+v, output %q", last, out.String())
	}
	if calls := ctl.Calls(); !reflect.DeepEqual(calls, []string{"resize 50x132", "signal INT"}) {
		t.Fatalf("controls %q", calls)
	}
}

// TestProcessWSDetach: closing the connection, or a protocol error, ends
// the attach (the backend's ctx) without an exit; the protocol error is
// said first.
func TestProcessWSDetach(t *testing.T) {
	for _, c := range []struct {
		name, msg, want string
	}{
		{"close", "", ""},
		{"resize without a terminal", `{"type":"resize","tty":{"rows":5,"cols":5}}`, "runs without a terminal"},
		{"unknown message", `{"type":"start","exec":{"cmd":["x"]}}`, "unknown control message type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := &backendtest.Fake{}
			detached := make(chan struct{})
			b.Terminals.AttachFn = func(ctx context.Context, ref, pid string, at backend.ProcessAttachment) (api.ExitStatus, error) {
				if at.Offset != nil {
					t.Errorf("offset %d without ?offset=", *at.Offset)
				}
				at.Started(&backendtest.Control{ID: "p1", PID: 42}, backendtest.Process("p1"), 1234)
				<-ctx.Done()
				close(detached)
				return api.ExitStatus{}, ctx.Err()
			}
			conn, _, err := websocket.Dial(context.Background(), wsServer(t, b)+sb+"/processes/p1/ws", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			if m := wsRead(t, conn); m.Type != api.ExecWSStarted || m.Offset != 1234 || m.Tty != nil {
				t.Fatalf("first message %+v", m)
			}
			if c.msg == "" {
				conn.Close(websocket.StatusNormalClosure, "")
			} else {
				wsSend(t, conn, websocket.MessageText, c.msg)
				last := wsLast(t, conn, nil)
				if last.Type != api.ExecWSError || last.Error == nil || last.Error.Code != api.CodeInvalidArgument && last.Error.Code != api.CodeBadRequest || !strings.Contains(last.Error.Message, c.want) {
					t.Fatalf("last %+v (%+v), want an error saying %q", last, last.Error, c.want)
				}
			}
			select {
			case <-detached:
			case <-time.After(time.Minute):
				t.Fatal("the attach outlived its client")
			}
		})
	}
}
