package clusterproxy_test

import (
	"bytes"
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

const natsToken = "nats-token-0123456789abcdef"

// roomLocal is a cluster.Local with room for capacity sandboxes of one
// vCPU each; it records the secrets each create got.
type roomLocal struct {
	mu       sync.Mutex
	capacity int
	made     []api.Sandbox
	secrets  [][]api.SecretSpec
}

func (l *roomLocal) Room(context.Context, api.CreateSandboxRequest) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.made) >= l.capacity {
		return errdefs.New(errdefs.ErrResourceExhausted, api.CodeCapacity, "no room")
	}
	return nil
}

func (l *roomLocal) CreateLocal(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if err := l.Room(ctx, req); err != nil {
		return api.Sandbox{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	sb := api.Sandbox{ID: "0123456789a" + string(rune('0'+len(l.made))), Name: req.Name, State: api.StateRunning, VCPUs: 1, CreatedAt: time.Now().UTC()}
	l.made = append(l.made, sb)
	l.secrets = append(l.secrets, req.Secrets)
	return sb, nil
}

func (l *roomLocal) Info(context.Context) (api.Info, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return api.Info{Capacity: api.Capacity{VCPUs: l.capacity, MemoryMiB: 1024 * l.capacity, UsedVCPUs: len(l.made)}}, nil
}

func (l *roomLocal) ListSandboxes(context.Context, map[string]string, string) ([]api.Sandbox, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]api.Sandbox(nil), l.made...), nil
}

func (l *roomLocal) DeleteSandbox(context.Context, string, bool) error { return nil }

func (l *roomLocal) Events(ctx context.Context, _ func(api.Event) error) error {
	<-ctx.Done()
	return nil
}

// joinServed joins node name to the NATS at natsURL and serves its API
// (with the cluster router) on loopback, as serve --cluster does: the
// create's secrets fetched over that API.
func joinServed(t *testing.T, natsURL, name string, local *roomLocal) *cluster.Node {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := clusterproxy.NewSecretsClient(clusterproxy.SecretsConfig{Token: clusterToken, Self: name, AllowHTTP: true})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Join(context.Background(), cluster.Config{Servers: []string{natsURL}, Token: natsToken, Node: name,
		Advertise: "http://" + l.Addr().String(), Version: "test", Local: local, FetchSecrets: sc.Fetch,
		Heartbeat: 200 * time.Millisecond, Expiry: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p, err := clusterproxy.New(clusterproxy.Config{Directory: n, Nodes: n, Token: clusterToken, Secrets: n})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := apiserver.NewServer(apiserver.Config{Backend: &backendtest.Fake{}, Token: clientToken,
		Keyring: auth.New(auth.Config{Admin: clientToken, Peer: clusterToken}), Router: p})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
		srv.Shutdown(ctx)
		<-done
		p.Close()
		sc.Close()
	})
	testenv.WaitFor(t, time.Minute, "node "+name+" up", func() bool {
		info, err := n.Node(context.Background(), name)
		return err == nil && info.State == cluster.NodeUp
	})
	return n
}

// A create with a secret that comes in at a and is made at b: b fetched
// the value from a over a's API (the cluster token, its name), not a
// byte of it went through NATS, and b's daemon got it whole.
func TestSecretsAcrossNodes(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
		NoLog: true, NoSigs: true, Authorization: natsToken})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("NATS did not come up")
	}
	tapConn, err := nats.Connect(ns.ClientURL(), nats.Token(natsToken))
	if err != nil {
		t.Fatal(err)
	}
	defer tapConn.Close()
	var (
		mu     sync.Mutex
		tapped [][]byte
	)
	if _, err := tapConn.Subscribe(">", func(m *nats.Msg) {
		var b bytes.Buffer
		b.WriteString(m.Subject)
		for k, vs := range m.Header {
			b.WriteString(k)
			for _, v := range vs {
				b.WriteString(v)
			}
		}
		b.Write(m.Data)
		mu.Lock()
		tapped = append(tapped, b.Bytes())
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := tapConn.Flush(); err != nil {
		t.Fatal(err)
	}

	la, lb := &roomLocal{}, &roomLocal{capacity: 1}
	a := joinServed(t, ns.ClientURL(), "a", la)
	joinServed(t, ns.ClientURL(), "b", lb)
	testenv.WaitFor(t, time.Minute, "a sees b", func() bool {
		info, err := a.Node(context.Background(), "b")
		return err == nil && info.State == cluster.NodeUp
	})
	const value = "Zk9-secret-value-across-nodes"
	req := api.CreateSandboxRequest{Image: "/images/base", Name: "web", VCPUs: 1,
		Secrets: []api.SecretSpec{{Name: "API_KEY", Value: value, Hosts: []string{"api.example.test"}}}}
	sb, err := a.Place(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	lb.mu.Lock()
	got := lb.secrets
	lb.mu.Unlock()
	la.mu.Lock()
	madeAtA := len(la.made)
	la.mu.Unlock()
	if len(got) != 1 || len(got[0]) != 1 || got[0][0].Value != value || got[0][0].Name != "API_KEY" || got[0][0].Hosts[0] != "api.example.test" {
		t.Fatalf("b made %s with secrets %+v", sb.ID, got)
	}
	if madeAtA != 0 {
		t.Fatalf("a made %d sandboxes", madeAtA)
	}
	mu.Lock()
	defer mu.Unlock()
	creates := 0
	for _, m := range tapped {
		if bytes.Contains(m, []byte(value)) {
			t.Errorf("the secret value went through NATS: %q", m)
		}
		if bytes.HasPrefix(m, []byte("agentbox.create.normal")) {
			creates++ // its publish, and its delivery to the taker
		}
	}
	if creates == 0 {
		t.Error("the tap saw no create message: it taps nothing")
	}
}
