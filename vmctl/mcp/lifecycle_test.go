package mcp_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/apiserver/apitest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// TestHTTPSessionEnds: over streamable HTTP, with Cleanup, a session's
// sandboxes are removed however the session ends: the client's DELETE,
// the idle timeout, and the server's Close (the daemon's shutdown); a
// sandbox of another session stays.
func TestHTTPSessionEnds(t *testing.T) {
	for _, end := range []string{"delete", "idle", "close"} {
		t.Run(end, func(t *testing.T) {
			var (
				mu      sync.Mutex
				boxes   = map[string]map[string]string{} // ID -> labels
				deleted []string
				n       int
			)
			b := &apitest.Backend{
				CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
					mu.Lock()
					defer mu.Unlock()
					n++
					sb := apitest.Sandbox(fmt.Sprintf("%012d", n))
					sb.Labels = req.Labels
					boxes[sb.ID] = req.Labels
					return sb, nil
				},
				ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
					mu.Lock()
					defer mu.Unlock()
					var out []api.Sandbox
					for id, l := range boxes {
						if l[mcp.SessionLabel] == labels[mcp.SessionLabel] {
							sb := apitest.Sandbox(id)
							sb.Labels = l
							out = append(out, sb)
						}
					}
					return out, nil
				},
				DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
					mu.Lock()
					defer mu.Unlock()
					delete(boxes, ref)
					deleted = append(deleted, ref)
					return nil
				},
			}
			as, err := apiserver.NewServer(apiserver.Config{Backend: b})
			if err != nil {
				t.Fatal(err)
			}
			srv, err := mcp.New(mcp.Config{Client: client.NewHandler(as.Handler()), Cleanup: true, DefaultImage: "/img"})
			if err != nil {
				t.Fatal(err)
			}
			idle := time.Duration(0)
			if end == "idle" {
				idle = 300 * time.Millisecond
			}
			hs := httptest.NewServer(srv.HTTPHandler(idle))
			defer hs.Close()
			connect := func() *sdk.ClientSession {
				cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
				if err != nil {
					t.Fatal(err)
				}
				res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
				if err != nil || res.IsError {
					t.Fatalf("create_sandbox: %v %+v", err, res)
				}
				return cs
			}
			other := connect() // sandbox 1, a session that stays (but for close)
			defer other.Close()
			cs := connect() // sandbox 2
			switch end {
			case "delete":
				cs.Close()
			case "idle":
				defer cs.Close() // after the timeout: the session is gone
			case "close":
				defer cs.Close()
				if err := srv.Close(); err != nil {
					t.Fatalf("Close: %v", err)
				}
			}
			want := []string{"000000000002"}
			if end == "close" {
				want = []string{"000000000001", "000000000002"}
			}
			deadline := time.Now().Add(10 * time.Second)
			for {
				mu.Lock()
				got := slices.Sorted(slices.Values(deleted))
				mu.Unlock()
				if slices.Equal(got, want) {
					break
				}
				if end == "idle" {
					// The other session is idle too: keep it alive.
					other.Ping(t.Context(), nil)
				}
				if time.Now().After(deadline) {
					t.Fatalf("removed %v, want %v", got, want)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

// TestCloseWithLateSession: a session that begins while Close is
// cleaning up the others (the daemon's listeners still accept) is ended
// too and cleaned up, and Close returns instead of waiting for that
// client to leave.
func TestCloseWithLateSession(t *testing.T) {
	var (
		mu      sync.Mutex
		boxes   = map[string]string{} // ID -> session
		deleted []string
		n       int
	)
	removing, release := make(chan struct{}, 4), make(chan struct{})
	b := &apitest.Backend{
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			n++
			sb := apitest.Sandbox(fmt.Sprintf("%012d", n))
			boxes[sb.ID] = req.Labels[mcp.SessionLabel]
			return sb, nil
		},
		ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
			mu.Lock()
			defer mu.Unlock()
			var out []api.Sandbox
			for id, session := range boxes {
				if session == labels[mcp.SessionLabel] {
					out = append(out, apitest.Sandbox(id))
				}
			}
			return out, nil
		},
		DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
			removing <- struct{}{}
			<-release
			mu.Lock()
			defer mu.Unlock()
			delete(boxes, ref)
			deleted = append(deleted, ref)
			return nil
		},
	}
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Config{Client: client.NewHandler(as.Handler()), Cleanup: true, DefaultImage: "/img"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.HTTPHandler(0))
	defer hs.Close()
	connect := func() *sdk.ClientSession {
		cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: hs.URL}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	first := connect()
	defer first.Close()
	if res, err := first.CallTool(t.Context(), &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("create_sandbox: %v %+v", err, res)
	}
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	<-removing // Close is removing the first session's sandbox

	late := connect()
	defer late.Close()
	// The late session is ended as soon as it is known: its call may
	// fail, but a sandbox it made is removed with the session.
	late.CallTool(t.Context(), &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits for a session that began while it ran")
	}
	mu.Lock()
	defer mu.Unlock()
	if got := slices.Sorted(slices.Values(deleted)); len(got) != n || got[0] != "000000000001" || len(boxes) != 0 {
		t.Fatalf("removed %v of the %d made; left %v", got, n, boxes)
	}
}
