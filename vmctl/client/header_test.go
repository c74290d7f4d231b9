package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// TestListSandboxesQueryWithHeader: ListSandboxesQuery sends its query as
// given (a repeated label kept in order); WithHeader's fields replace the
// client's User-Agent and WithToken's Authorization and come on top of the
// rest, and changing the header after New changes nothing.
func TestListSandboxesQueryWithHeader(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		json.NewEncoder(w).Encode(api.SandboxList{Sandboxes: []api.Sandbox{{ID: "aaaaaaaaaaaa"}}})
	}))
	t.Cleanup(srv.Close)
	h := http.Header{"User-Agent": {"agentbox-cluster"}, "Authorization": {"Bearer peer"}, "X-Agentbox-Caller": {"token"}}
	c, err := client.NewTCP(srv.URL, client.WithToken("client-token"), client.WithHeader(h))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h.Set("X-Agentbox-Caller", "changed")
	list, err := c.ListSandboxesQuery(context.Background(), url.Values{"label": {"team=x", "env=ci"}, "state": {"running"}})
	if err != nil || len(list) != 1 || list[0].ID != "aaaaaaaaaaaa" {
		t.Fatalf("ListSandboxesQuery = %+v, %v", list, err)
	}
	if got.URL.Path != "/v1/sandboxes" || !slices.Equal(got.URL.Query()["label"], []string{"team=x", "env=ci"}) || got.URL.Query().Get("state") != "running" {
		t.Errorf("request %s %s", got.Method, got.URL)
	}
	for k, want := range map[string]string{"User-Agent": "agentbox-cluster", "Authorization": "Bearer peer", "X-Agentbox-Caller": "token"} {
		if vs := got.Header.Values(k); !slices.Equal(vs, []string{want}) {
			t.Errorf("%s: %q, want %q", k, vs, want)
		}
	}
}
