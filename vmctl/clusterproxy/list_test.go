package clusterproxy_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/cluster"
)

// TestListAsksAPeerAsTheCaller: a's list asks node c (a bare HTTP server
// here) GET /v1/sandboxes with the caller's query, the cluster token, the
// caller, tenant and loop guard headers and User-Agent agentbox-cluster,
// fills in the Node c leaves empty; an error answer or a redirect (not
// followed) makes c's directory entries unknown, or leaves them out of a
// filtered list.
func TestListAsksAPeerAsTheCaller(t *testing.T) {
	var (
		mu     sync.Mutex
		asked  []*http.Request
		answer = http.StatusOK
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Clone(context.Background()))
		st := answer
		mu.Unlock()
		switch st {
		case http.StatusOK:
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			json.NewEncoder(w).Encode(api.SandboxList{Sandboxes: []api.Sandbox{{ID: idC, State: api.StateRunning}}})
		case http.StatusFound:
			http.Redirect(w, r, "/v1/sandboxes?again=1", st)
		default:
			http.Error(w, "down", st)
		}
	}))
	t.Cleanup(srv.Close)
	f := newFakeCluster()
	a := startNode(t, f, "a", "acme")
	a.backend.ListSandboxesFn = func(context.Context, map[string]string, string) ([]api.Sandbox, error) { return nil, nil }
	f.place(idC, "onc", "c", "acme")
	f.setNode(cluster.NodeInfo{Name: "c", Advertise: srv.URL + "/", State: cluster.NodeUp, LastSeen: time.Now()})

	list, err := a.client(t).ListSandboxes(context.Background(), map[string]string{"team": "x", "env": "ci"}, api.StateRunning)
	if err != nil || len(list) != 1 || list[0].ID != idC || list[0].Node != "c" || list[0].State != api.StateRunning {
		t.Fatalf("list = %+v, %v; want c's sandbox, its Node filled in", list, err)
	}
	mu.Lock()
	r := asked[0]
	mu.Unlock()
	if q := r.URL.Query(); r.Method != http.MethodGet || r.URL.Path != "/v1/sandboxes" ||
		!slices.Equal(q["label"], []string{"env=ci", "team=x"}) || q.Get("state") != api.StateRunning || len(q) != 2 {
		t.Errorf("c was asked %s %s", r.Method, r.URL)
	}
	for k, want := range map[string]string{
		"User-Agent": "agentbox-cluster", "Authorization": "Bearer " + clusterToken,
		"X-Agentbox-Caller": "token", "X-Agentbox-Tenant": "acme", "X-Agentbox-Forwarded-By": "a",
	} {
		if vs := r.Header.Values(k); !slices.Equal(vs, []string{want}) {
			t.Errorf("c was asked with %s %q, want %q", k, vs, want)
		}
	}

	for _, st := range []int{http.StatusInternalServerError, http.StatusFound} {
		mu.Lock()
		answer, asked = st, nil
		mu.Unlock()
		list, err := a.client(t).ListSandboxes(context.Background(), nil, "")
		if err != nil || len(list) != 1 || list[0].ID != idC || list[0].State != api.StateUnknown || list[0].Reason != api.CodeNodeUnreachable {
			t.Errorf("c answering %d: list = %+v, %v; want its entry unknown", st, list, err)
		}
		mu.Lock()
		n := len(asked)
		mu.Unlock()
		if n != 1 {
			t.Errorf("c answering %d was asked %d times, want once (no redirect followed)", st, n)
		}
		if list, err := a.client(t).ListSandboxes(context.Background(), nil, api.StateRunning); err != nil || len(list) != 0 {
			t.Errorf("c answering %d: filtered list = %+v, %v; want none", st, list, err)
		}
	}
}
