package mcp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/mcp"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// TestHTTPSessionTenant: over streamable HTTP behind an auth that names
// the tenant (here the test's X-Tenant header, as the API's TCP auth does
// from the token), a session's tool calls reach the service as the tenant
// that opened it, and another tenant's request naming the session is
// answered 404 like an unknown session.
func TestHTTPSessionTenant(t *testing.T) {
	var mu sync.Mutex
	var creators []string
	b := &backendtest.Fake{CreateSandboxFn: func(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
		mu.Lock()
		defer mu.Unlock()
		creators = append(creators, tenant.Name(ctx))
		return backendtest.Sandbox("0123456789ab"), nil
	}}
	as, err := apiserver.NewServer(apiserver.Config{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mcp.New(mcp.Config{Client: client.NewHandler(as.Handler()), DefaultImage: "/img"})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.HTTPHandler(0)
	auth := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who *tenant.Tenant
		if name := r.Header.Get("X-Tenant"); name != "" {
			who = &tenant.Tenant{Name: name}
		}
		h.ServeHTTP(w, r.WithContext(tenant.With(r.Context(), who)))
	})
	hs := httptest.NewServer(auth)
	t.Cleanup(hs.Close)
	withTenant := func(name string) *http.Client {
		return &http.Client{Transport: headerTransport{name}}
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &sdk.StreamableClientTransport{Endpoint: hs.URL, HTTPClient: withTenant("a")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "create_sandbox", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("create_sandbox: %v %+v", err, res)
	}
	mu.Lock()
	got := strings.Join(creators, ",")
	mu.Unlock()
	if got != "a" {
		t.Fatalf("creates by tenants %q, want a", got)
	}
	for _, who := range []string{"b", ""} {
		req, _ := http.NewRequest("POST", hs.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", cs.ID())
		resp, err := withTenant(who).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("tenant %q using a's session: %d, want 404", who, resp.StatusCode)
		}
	}
}

// headerTransport names the tenant in X-Tenant.
type headerTransport struct{ name string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.name != "" {
		r.Header.Set("X-Tenant", h.name)
	}
	return http.DefaultTransport.RoundTrip(r)
}
