package clusterproxy_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
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

// The tokens of the test cluster: what clients send (each node's
// --token-file) and what nodes send each other (--cluster-token-file).
const (
	clientToken  = "client-token-0123456789abcdef"
	clusterToken = "cluster-token-0123456789abcdef"
)

// fakeCluster is a Directory and the membership every node reads.
type fakeCluster struct {
	mu      sync.Mutex
	entries []cluster.Entry
	nodes   map[string]cluster.NodeInfo
	// dirErr, if set, fails every directory call (NATS down).
	dirErr error
	// lookups counts Lookup calls.
	lookups int
}

// local is node's Config.Local: the entries placed on it.
func (f *fakeCluster) local(node string) func(string) bool {
	return func(ref string) bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, e := range f.entries {
			if e.Node == node && (e.ID == ref || (e.Name != "" && e.Name == ref)) {
				return true
			}
		}
		return false
	}
}

func newFakeCluster() *fakeCluster { return &fakeCluster{nodes: map[string]cluster.NodeInfo{}} }

func (f *fakeCluster) place(id, name, node, tenant string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.entries = append(f.entries, cluster.Entry{ID: id, Name: name, Node: node, Tenant: tenant})
}

func (f *fakeCluster) setNode(info cluster.NodeInfo) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes[info.Name] = info
}

func (f *fakeCluster) Lookup(_ context.Context, ref string) (cluster.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups++
	if f.dirErr != nil {
		return cluster.Entry{}, f.dirErr
	}
	for _, e := range f.entries {
		if e.ID == ref || (e.Name != "" && e.Name == ref) {
			return e, nil
		}
	}
	return cluster.Entry{}, errdefs.ErrNotFound
}

func (f *fakeCluster) List(context.Context) ([]cluster.Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dirErr != nil {
		return nil, f.dirErr
	}
	return append([]cluster.Entry(nil), f.entries...), nil
}

// nodesOf is the membership as node self reads it.
type nodesOf struct {
	f    *fakeCluster
	self string
}

func (n nodesOf) Self() string { return n.self }

func (n nodesOf) Node(_ context.Context, name string) (cluster.NodeInfo, error) {
	n.f.mu.Lock()
	defer n.f.mu.Unlock()
	info, ok := n.f.nodes[name]
	if !ok {
		return cluster.NodeInfo{}, errdefs.ErrNotFound
	}
	return info, nil
}

// tenantKey carries the test's tenant in a request context (what
// vmctl/tenant does in the daemon).
type tenantKey struct{}

func tenantFrom(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// node is one test daemon: an API server on loopback TCP over a fake
// backend, with a clusterproxy Router.
type node struct {
	name    string
	url     string
	backend *backendtest.Fake
	proxy   *clusterproxy.Proxy
	srv     *apiserver.Server
}

// startNode serves a node named name of cluster f; clientTenant, if not
// "", is the tenant of every client request that reaches it directly
// (as a --tenants file mapping the client token would make it).
func startNode(t testing.TB, f *fakeCluster, name, clientTenant string) *node {
	t.Helper()
	b := &backendtest.Fake{}
	p, err := clusterproxy.New(clusterproxy.Config{
		Directory: f,
		Nodes:     nodesOf{f, name},
		Local:     f.local(name),
		Token:     clusterToken + "\n",
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, nil)),
		TenantOf: func(ctx context.Context) string {
			if tn := tenantFrom(ctx); tn != "" {
				return tn
			}
			return clientTenant
		},
		WithTenant: func(ctx context.Context, tn string) (context.Context, error) {
			if tn != "acme" && tn != "other" {
				return nil, api.Errorf(http.StatusForbidden, api.CodePermissionDenied, "unknown tenant %q", tn)
			}
			return context.WithValue(ctx, tenantKey{}, tn), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	keys := auth.New(auth.Config{Admin: clientToken, Peer: clusterToken + "\n"})
	srv, err := apiserver.NewServer(apiserver.Config{Backend: b, Token: clientToken, Keyring: keys, Router: p})
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
	n := &node{name: name, url: "http://" + l.Addr().String(), backend: b, proxy: p, srv: srv}
	f.setNode(cluster.NodeInfo{Name: name, Advertise: n.url, State: cluster.NodeUp, LastSeen: time.Now()})
	return n
}

// client returns a client of n with the client token.
func (n *node) client(t testing.TB) *client.Client {
	t.Helper()
	c, err := client.NewTCP(n.url, client.WithToken(clientToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// callers records the caller and tenant of each backend call.
type callers struct {
	mu   sync.Mutex
	seen []string
}

func (c *callers) record(ctx context.Context) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, api.CallerFrom(ctx).ID+"/"+tenantFrom(ctx))
}

func (c *callers) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

func errorsAs(err error, target **api.Error) bool { return errors.As(err, target) }
