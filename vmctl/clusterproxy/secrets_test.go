package clusterproxy_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// holder is a node's store of one queued create's secrets, for "b" only.
type holder struct {
	mu    sync.Mutex
	asked []string // "ref by node"
}

const createRef = "00112233445566778899aabbccddeeff"

func (h *holder) TakeSecrets(_ context.Context, ref, node string) ([]api.SecretSpec, error) {
	h.mu.Lock()
	h.asked = append(h.asked, ref+" by "+node)
	h.mu.Unlock()
	switch {
	case ref != createRef:
		return nil, errdefs.ErrNotFound.WithMessage("no such create")
	case node != "b":
		return nil, errdefs.ErrPermissionDenied.WithMessage("node " + node + " did not take create")
	}
	return []api.SecretSpec{{Name: "API_KEY", Value: "v4lue", Hosts: []string{"api.example.test"}}}, nil
}

func (h *holder) calls() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.asked...)
}

// startOrigin serves a node "a" whose Proxy holds h, on loopback.
func startOrigin(t *testing.T, h *holder) cluster.NodeInfo {
	t.Helper()
	f := newFakeCluster()
	p, err := clusterproxy.New(clusterproxy.Config{Directory: f, Nodes: nodesOf{f, "a"}, Token: clusterToken, Secrets: h})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: clientToken,
		Keyring: auth.New(auth.Config{Admin: clientToken, Peer: clusterToken}), Router: p})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
		p.Close()
	})
	return cluster.NodeInfo{Name: "a", Advertise: "http://" + l.Addr().String(), State: cluster.NodeUp}
}

func secretsClient(t *testing.T, token, self string, allowHTTP bool) *clusterproxy.SecretsClient {
	t.Helper()
	c, err := clusterproxy.NewSecretsClient(clusterproxy.SecretsConfig{Token: token, Self: self, AllowHTTP: allowHTTP})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// The taker fetches a create's secrets from its origin over the API with
// the cluster token and its name; the origin hands them only to a peer
// (never to a client, whatever headers it sends), and only to the node
// its store says took the create.
func TestSecretsFetchOverTheAPI(t *testing.T) {
	h := &holder{}
	origin := startOrigin(t, h)
	ctx := context.Background()
	got, err := secretsClient(t, clusterToken, "b", true).Fetch(ctx, origin, createRef)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "API_KEY" || got[0].Value != "v4lue" || len(got[0].Hosts) != 1 || got[0].Hosts[0] != "api.example.test" {
		t.Fatalf("fetched %+v", got)
	}
	_, err = secretsClient(t, clusterToken, "c", true).Fetch(ctx, origin, createRef)
	if ae := api.ErrorFrom(err); ae.Status != 403 || ae.Message != "node c did not take create" {
		t.Fatalf("another node: %v", err)
	}
	_, err = secretsClient(t, clusterToken, "b", true).Fetch(ctx, origin, "ffeeddccbbaa99887766554433221100")
	if ae := api.ErrorFrom(err); ae.Status != 404 {
		t.Fatalf("unknown create: %v", err)
	}
	// A wrong cluster token: 401, the store is not asked.
	_, err = secretsClient(t, "not-the-cluster-token-0123", "b", true).Fetch(ctx, origin, createRef)
	if ae := api.ErrorFrom(err); ae.Status != 401 {
		t.Fatalf("wrong token: %v", err)
	}
	// A client (the admin's token) naming a node: the header is not
	// believed, the store is not asked.
	admin, err := client.NewTCP(origin.Advertise, client.WithToken(clientToken), client.WithHeader(http.Header{clusterproxy.HeaderForwardedBy: {"b"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	_, err = admin.ClusterSecrets(ctx, createRef)
	if ae := api.ErrorFrom(err); ae.Status != 403 || !strings.Contains(ae.Message, "only another node of the cluster") {
		t.Fatalf("a client's fetch: %v", err)
	}
	want := []string{createRef + " by b", createRef + " by c", "ffeeddccbbaa99887766554433221100 by b"}
	if calls := h.calls(); strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("store asked %q, want %q", calls, want)
	}
}

// Without --cluster-trusted-network a taker fetches no secrets from an
// http:// origin (they would cross the network in clear); an answer over
// MaxSecretsAnswerBytes is cut off.
func TestSecretsFetchRefusals(t *testing.T) {
	h := &holder{}
	origin := startOrigin(t, h)
	_, err := secretsClient(t, clusterToken, "b", false).Fetch(context.Background(), origin, createRef)
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "secrets cross the network only over https:// unless every node runs with --cluster-trusted-network") {
		t.Fatalf("http:// origin: %v", err)
	}
	if calls := h.calls(); len(calls) != 0 {
		t.Errorf("store asked %q", calls)
	}
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"secrets":[{"name":"K","value":"`))
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range clusterproxy.MaxSecretsAnswerBytes/len(chunk) + 2 {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer big.Close()
	_, err = secretsClient(t, clusterToken, "b", true).Fetch(context.Background(), cluster.NodeInfo{Name: "a", Advertise: big.URL}, createRef)
	if err == nil || !strings.Contains(err.Error(), "the answer is longer than 4194304 bytes") {
		t.Fatalf("oversized answer: %v", err)
	}
}
