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
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
)

// boxStore is a fake backend's sandboxes for the session-cleanup tests:
// created sandboxes are numbered 000000000001, 000000000002, ...; the
// list filters by the session label; deleted records the removed IDs.
type boxStore struct {
	mu      sync.Mutex
	boxes   map[string]map[string]string // ID -> labels
	deleted []string
	n       int
	// beforeDelete, if set, runs at the start of each delete (outside mu).
	beforeDelete func()
}

func (st *boxStore) backend() *backendtest.Fake {
	st.boxes = map[string]map[string]string{}
	return &backendtest.Fake{
		CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			st.n++
			sb := backendtest.Sandbox(fmt.Sprintf("%012d", st.n))
			sb.Labels = req.Labels
			st.boxes[sb.ID] = req.Labels
			return sb, nil
		},
		ListSandboxesFn: func(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			var out []api.Sandbox
			for id, l := range st.boxes {
				if l[mcp.SessionLabel] == labels[mcp.SessionLabel] {
					sb := backendtest.Sandbox(id)
					sb.Labels = l
					out = append(out, sb)
				}
			}
			return out, nil
		},
		DeleteSandboxFn: func(ctx context.Context, ref string, force bool) error {
			if st.beforeDelete != nil {
				st.beforeDelete()
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			delete(st.boxes, ref)
			st.deleted = append(st.deleted, ref)
			return nil
		},
	}
}

// removed is the sorted IDs deleted so far.
func (st *boxStore) removed() []string {
	st.mu.Lock()
	defer st.mu.Unlock()
	return slices.Sorted(slices.Values(st.deleted))
}

// cleanupServer is an MCP server with Cleanup over b, served over
// streamable HTTP with the idle timeout idle (0: none).
func cleanupServer(t *testing.T, b *backendtest.Fake, idle time.Duration) (*mcp.Server, *httptest.Server) {
	t.Helper()
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Config{Client: client.NewHandler(as.Handler()), Cleanup: true, DefaultImage: "/img"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.HTTPHandler(idle))
	t.Cleanup(hs.Close)
	return srv, hs
}

// connectHTTP opens an MCP session with the server at url.
func connectHTTP(t *testing.T, url string) *sdk.ClientSession {
	t.Helper()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestHTTPSessionEnds: over streamable HTTP, with Cleanup, a session's
// sandboxes are removed however the session ends: the client's DELETE,
// the idle timeout, and the server's Close (the daemon's shutdown); a
// sandbox of another session stays.
func TestHTTPSessionEnds(t *testing.T) {
	for _, end := range []string{"delete", "idle", "close"} {
		t.Run(end, func(t *testing.T) {
			st := &boxStore{}
			idle := time.Duration(0)
			if end == "idle" {
				idle = 300 * time.Millisecond
			}
			srv, hs := cleanupServer(t, st.backend(), idle)
			connect := func() *sdk.ClientSession {
				cs := connectHTTP(t, hs.URL)
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
				got := st.removed()
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
	removing, release := make(chan struct{}, 4), make(chan struct{})
	st := &boxStore{beforeDelete: func() {
		removing <- struct{}{}
		<-release
	}}
	srv, hs := cleanupServer(t, st.backend(), 0)
	first := connectHTTP(t, hs.URL)
	defer first.Close()
	if res, err := first.CallTool(t.Context(), &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Fatalf("create_sandbox: %v %+v", err, res)
	}
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	<-removing // Close is removing the first session's sandbox

	late := connectHTTP(t, hs.URL)
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
	st.mu.Lock()
	defer st.mu.Unlock()
	if got := slices.Sorted(slices.Values(st.deleted)); len(got) != st.n || got[0] != "000000000001" || len(st.boxes) != 0 {
		t.Fatalf("removed %v of the %d made; left %v", got, st.n, st.boxes)
	}
}
