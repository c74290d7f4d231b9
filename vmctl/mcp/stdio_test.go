package mcp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStdioCancelled: over NewStdioTransport a call the client cancels
// (notifications/cancelled) gets no response at all, as the MCP
// specification asks; its command's context is cancelled; the calls
// around it are answered. The check is exact: the session ends (stdin
// closed) only once every call's handler returned and its answer, if any,
// was written.
func TestStdioCancelled(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	var stdin []byte
	b := &backendtest.Fake{
		ExecFn: func(ctx context.Context, ref string, req api.ExecRequest, started1 func(string, int), stdout, stderr io.Writer) (api.ExitStatus, error) {
			if req.Cmd[len(req.Cmd)-1] != "sleep 600" {
				stdin = req.Stdin
				return api.ExitStatus{ExitCode: 0}, nil
			}
			started1("e1", 10)
			close(started)
			<-ctx.Done()
			ended <- ctx.Err()
			return api.ExitStatus{}, ctx.Err()
		},
	}
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Config{Client: client.NewHandler(as.Handler())})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var wire lockedBuffer // what the server wrote
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(context.Background(), mcp.NewStdioTransport(inR, io.MultiWriter(outW, &wire)))
		outW.Close()
	}()
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			json.Unmarshal(sc.Bytes(), &m)
			lines <- m
		}
		close(lines)
	}()
	send := func(msg string) {
		t.Helper()
		if _, err := io.WriteString(inW, msg+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	answer := func(id float64) map[string]any {
		t.Helper()
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("the server ended before answering %v; it wrote:\n%s", id, wire.String())
				}
				if m["id"] == id {
					return m
				}
			case <-time.After(time.Minute):
				t.Fatalf("no answer to %v; the server wrote:\n%s", id, wire.String())
			}
		}
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	answer(1)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox":"w1","command":"sleep 600"}}}`)
	<-started
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"the user pressed stop"}}`)
	if err := <-ended; err != context.Canceled {
		t.Fatalf("the command's context: %v, want cancelled", err)
	}
	send(`{"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox":"w1","command":"true"}},"jsonrpc":"2.0","id":3}`)
	if m := answer(3); m["result"] == nil {
		t.Fatalf("call 3: %v", m)
	}
	// A line longer than the transport's buffer passes whole.
	big := strings.Repeat("x", 300<<10)
	send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"run_command","arguments":{"sandbox":"w1","command":"wc -c","stdin":"` + big + `"}}}`)
	if m := answer(4); m["result"] == nil || string(stdin) != big {
		t.Fatalf("call 4: %v; %d bytes of stdin", m, len(stdin))
	}
	inW.Close() // the session ends once every handler returned and answered
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	for range lines {
	}
	for _, l := range strings.Split(strings.TrimSpace(wire.String()), "\n") {
		var m struct {
			ID any `json:"id"`
		}
		json.Unmarshal([]byte(l), &m)
		if fmt.Sprint(m.ID) == "2" {
			t.Fatalf("the cancelled call was answered: %s", l)
		}
	}
}
