package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// natsCluster is a three-server JetStream cluster in the test process, on
// loopback ports that stay the same across restarts (and stores in
// t.TempDir), so a test can stop servers and start them again.
type natsCluster struct {
	t       testing.TB
	dir     string
	ports   []int // client ports
	routes  []int // cluster ports
	servers []*server.Server
}

// freePorts returns n distinct free loopback ports: all n listeners are
// held until the last is chosen, as the kernel may hand out a port just
// closed again (two servers on one port: one never comes up).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// testNATSToken is the NATS token of the test servers (authorization {
// token }): Join refuses a NATS without authentication.
const testNATSToken = "nats-test-token-0123456789"

func startNATS(t testing.TB, size int) *natsCluster {
	t.Helper()
	c := &natsCluster{t: t, dir: t.TempDir(), servers: make([]*server.Server, size)}
	ports := freePorts(t, 2*size)
	c.ports, c.routes = ports[:size], ports[size:]
	for i := range size {
		c.start(i)
	}
	for i := range size {
		if !c.servers[i].ReadyForConnections(20 * time.Second) {
			t.Fatalf("NATS server %d did not come up", i)
		}
	}
	t.Cleanup(func() {
		for i := range c.servers {
			c.stop(i)
		}
	})
	return c
}

func (c *natsCluster) start(i int) {
	opts := &server.Options{
		ServerName: "n" + strconv.Itoa(i), Host: "127.0.0.1", Port: c.ports[i],
		JetStream: true, StoreDir: filepath.Join(c.dir, "n"+strconv.Itoa(i)),
		NoLog: true, NoSigs: true, Authorization: testNATSToken,
	}
	if len(c.ports) > 1 {
		opts.Cluster = server.ClusterOpts{Name: "agentbox-test", Host: "127.0.0.1", Port: c.routes[i]}
		for j, p := range c.routes {
			if j != i {
				opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: "127.0.0.1:" + strconv.Itoa(p)})
			}
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	c.servers[i] = s
}

func (c *natsCluster) stop(i int) {
	if s := c.servers[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.servers[i] = nil
	}
}

func (c *natsCluster) urls() []string {
	var out []string
	for _, p := range c.ports {
		out = append(out, "nats://127.0.0.1:"+strconv.Itoa(p))
	}
	return out
}

// fakeLocal is a node's daemon: sandboxes that cost vCPUs against a
// capacity, made at once (or after delay), failing with fail's error.
type fakeLocal struct {
	mu       sync.Mutex
	capacity int // vCPUs
	used     int
	boxes    map[string]api.Sandbox
	subs     map[chan api.Event]struct{}
	fail     error
	delay    time.Duration
	creates  int
	onCreate func(ctx context.Context)          // called with each create's context
	onRoom   func(req api.CreateSandboxRequest) // called, unlocked, before each room check; set under mu
	hold     func(req api.CreateSandboxRequest) // called, unlocked, before a create returns
	secrets  [][]api.SecretSpec                 // each create's secrets, as CreateLocal got them
}

func newFakeLocal(capacity int) *fakeLocal {
	return &fakeLocal{capacity: capacity, boxes: map[string]api.Sandbox{}, subs: map[chan api.Event]struct{}{}}
}

var errFakeCapacity = errdefs.New(errdefs.ErrResourceExhausted, api.CodeCapacity, "host capacity exceeded")

func shape(req api.CreateSandboxRequest) int { return max(1, req.VCPUs) }

func (f *fakeLocal) Room(ctx context.Context, req api.CreateSandboxRequest) error {
	f.mu.Lock()
	onRoom := f.onRoom
	f.mu.Unlock()
	if onRoom != nil {
		onRoom(req)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.used+shape(req) > f.capacity {
		return errFakeCapacity.WithMessage(fmt.Sprintf("host capacity exceeded: %d of %d vCPUs are committed", f.used, f.capacity))
	}
	return nil
}

func (f *fakeLocal) CreateLocal(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.mu.Lock()
	if f.onCreate != nil {
		f.onCreate(ctx)
	}
	if len(req.Secrets) > 0 {
		f.secrets = append(f.secrets, req.Secrets)
	}
	if f.fail != nil {
		f.mu.Unlock()
		return api.Sandbox{}, f.fail
	}
	if f.used+shape(req) > f.capacity {
		f.mu.Unlock()
		return api.Sandbox{}, errFakeCapacity.WithMessage("host capacity exceeded")
	}
	for _, b := range f.boxes {
		if req.Name != "" && b.Name == req.Name {
			f.mu.Unlock()
			return api.Sandbox{}, ErrNameTaken.WithMessage("name taken on this host")
		}
	}
	var id [6]byte
	rand.Read(id[:])
	sb := api.Sandbox{ID: hex.EncodeToString(id[:]), Name: req.Name, State: "running", VCPUs: shape(req), Labels: req.Labels, CreatedAt: time.Now().UTC()}
	f.used += sb.VCPUs
	f.boxes[sb.ID] = sb
	f.creates++
	f.publishLocked(api.Event{Type: api.EventSandboxCreated, Sandbox: sb.ID, Name: sb.Name, Time: sb.CreatedAt})
	delay, hold := f.delay, f.hold
	f.mu.Unlock()
	time.Sleep(delay)
	if hold != nil {
		hold(req)
	}
	return sb, nil
}

func (f *fakeLocal) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.boxes[ref]
	if !ok {
		return errdefs.ErrNotFound.WithMessage("no such sandbox " + ref)
	}
	delete(f.boxes, ref)
	f.used -= sb.VCPUs
	f.publishLocked(api.Event{Type: api.EventSandboxRemoved, Sandbox: sb.ID, Name: sb.Name, Time: time.Now()})
	return nil
}

func (f *fakeLocal) publishLocked(ev api.Event) {
	for ch := range f.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (f *fakeLocal) Info(ctx context.Context) (api.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return api.Info{Capacity: api.Capacity{VCPUs: f.capacity, MemoryMiB: 1024 * f.capacity, UsedVCPUs: f.used, UsedMemoryMiB: 1024 * f.used},
		Sandboxes: map[string]int{"running": len(f.boxes)}}, nil
}

func (f *fakeLocal) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []api.Sandbox
	for _, b := range f.boxes {
		out = append(out, b)
	}
	return out, nil
}

func (f *fakeLocal) Events(ctx context.Context, emit func(api.Event) error) error {
	ch := make(chan api.Event, 1024)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-ch:
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
}

func (f *fakeLocal) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.boxes)
}

func (f *fakeLocal) any() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.boxes {
		return id
	}
	return ""
}

// joinNode starts a node on the cluster with fast heartbeats.
func joinNode(t testing.TB, nc *natsCluster, name string, local *fakeLocal, tweak func(*Config)) *Node {
	t.Helper()
	cfg := Config{
		Servers: nc.urls(), Token: testNATSToken, Node: name, Advertise: "http://" + name + ".test:7070", Version: "test",
		Local: local, QueueTimeout: 30 * time.Second,
		Heartbeat: 200 * time.Millisecond, Expiry: 2 * time.Second,
	}
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := Join(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	testenv.WaitFor(t, 60*time.Second, "node "+name+" joins", func() bool {
		info, err := n.Node(context.Background(), name)
		return err == nil && info.State == NodeUp
	})
	return n
}
