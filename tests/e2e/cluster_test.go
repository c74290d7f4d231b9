package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/tests/testenv"
)

// natsServer is a JetStream NATS server in the test process on a
// loopback port that stays the same across restarts, its store in
// t.TempDir.
type natsServer struct {
	t    *testing.T
	port int
	dir  string
	srv  *server.Server
}

func startNATS(t *testing.T) *natsServer {
	n := &natsServer{t: t, port: freePort(t), dir: t.TempDir()}
	n.start()
	t.Cleanup(n.stop) // registered first: runs after the daemons' cleanups
	return n
}

// natsToken authenticates the daemons and the test to NATS (serve
// refuses a NATS without authentication): in the URL, nats://TOKEN@….
const natsToken = "nats-e2e-token-0123456789"

func (n *natsServer) url() string {
	return "nats://" + natsToken + "@127.0.0.1:" + strconv.Itoa(n.port)
}

func (n *natsServer) start() {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: n.port, JetStream: true,
		StoreDir: filepath.Join(n.dir, "js"), NoLog: true, NoSigs: true, Authorization: natsToken})
	must(n.t, "NATS server", err)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		n.t.Fatal("NATS did not come up")
	}
	n.srv = s
}

// queued returns how many creates wait in the normal priority queue.
func (n *natsServer) queued(t *testing.T) uint64 {
	nc, err := nats.Connect(n.url())
	must(t, "connect to NATS", err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(t, "JetStream", err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "AGENTBOX_CREATE_NORMAL")
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func (n *natsServer) stop() {
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

type wireNode struct {
	Name      string `json:"name"`
	State     string `json:"state"`
	Reason    string `json:"reason"`
	Sandboxes int    `json:"sandboxes"`
	Capacity  struct {
		VCPUs     int `json:"vcpus"`
		UsedVCPUs int `json:"used_vcpus"`
	} `json:"capacity"`
}

// nodes returns the cluster's nodes through d, or nil if it cannot.
func (d *daemon) nodes() []wireNode {
	ctx, cancel := context.WithTimeout(context.Background(), requestTimeout)
	defer cancel()
	st, body, _, err := d.roundTrip(ctx, "GET", "/v1/nodes", nil, "")
	var list struct {
		Nodes []wireNode `json:"nodes"`
	}
	if err != nil || st != http.StatusOK || json.Unmarshal(body, &list) != nil {
		return nil
	}
	return list.Nodes
}

// Two real daemons on one NATS server, each with room for one sandbox:
// creates through a land on a and b, b answers for a's sandbox, a full
// cluster queues a
// create until a removal on b, drain shows in `agentbox nodes`, and
// without NATS a create is refused with 503 cluster_unavailable while
// a's own sandbox still answers; with NATS back creates work again.
func TestCluster(t *testing.T) {
	nats := startNATS(t)
	vcpus, _ := imageResources(t)
	room := strconv.Itoa(vcpus)
	dir := t.TempDir()
	clientToken, clusterToken := filepath.Join(dir, "api.token"), filepath.Join(dir, "cluster.token")
	must(t, "token", os.WriteFile(clientToken, []byte("client-token-0123456789abcdef\n"), 0o600))
	must(t, "token", os.WriteFile(clusterToken, []byte("cluster-token-0123456789abcdef\n"), 0o600))
	node := func(name string, octet byte, extra ...string) *daemon {
		addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
		flags := append(netFlags(t, octet, "abcl"+name), "--capacity-vcpus", room, "--listen-tcp", addr,
			"--cluster", nats.url(), "--node", name, "--advertise", "http://"+addr, "--cluster-trusted-network", "--cluster-token-file", clusterToken)
		d := newDaemon(t, append(flags, extra...)...)
		d.Globals = []string{"--token-file", clientToken}
		must(t, "start node "+name, d.Start())
		return d
	}
	a := node("a", 71, "--queue-timeout", "3m")
	b := node("b", 72)
	testenv.WaitFor(t, time.Minute, "both nodes up", func() bool {
		ns := a.nodes()
		return len(ns) == 2 && ns[0].State == "up" && ns[1].State == "up"
	})

	first := a.create(createBody(t, `"name":"first"`))
	second := a.create(createBody(t, `"name":"second"`))
	owner := map[string]string{}
	for _, sb := range []wireSandbox{first, second} {
		owner[sb.Name] = a.nodeOf(sb.ID)
		b.Track(sb.ID)
	}
	if owner["first"] == "" || owner["second"] == "" || owner["first"] == owner["second"] {
		t.Fatalf("two creates into two nodes with room for one each: first on %q, second on %q", owner["first"], owner["second"])
	}
	onA, onB := first, second
	if owner["first"] == "b" {
		onA, onB = second, first
	}
	// Any node answers for any sandbox: b runs a command in a's.
	b.expectExec(onA.ID, `{"cmd":["echo","through b"]}`, 0, "through b\n", "")
	// cp both ways and a watch through b are a's sandbox's, byte-exact.
	data := append(randomBytes(300<<10), 0, 1, 0xff, '\n', '\r')
	in, back := filepath.Join(dir, "in.bin"), filepath.Join(dir, "back.bin")
	must(t, "write", os.WriteFile(in, data, 0o640))
	expect(t, b.cli(nil, "cp", in, onA.ID+":/root/in.bin"), 0, "", "")
	expect(t, a.cli(nil, "exec", onA.ID, "--", "sha256sum", "/root/in.bin"), 0, sha(data)+"  /root/in.bin\n", "")
	expect(t, b.cli(nil, "cp", onA.ID+":/root/in.bin", back), 0, "", "")
	if got, err := os.ReadFile(back); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("cp back through b: %d bytes (sha %s), %v; want the %d bytes sent (sha %s)", len(got), sha(got), err, len(data), sha(data))
	}
	w := b.startWatch(onA.ID, "/root")
	expect(t, a.cli(nil, "exec", onA.ID, "--", "sh", "-c", ": > /root/w.txt"), 0, "", "")
	w.expect("CREATE /root/w.txt")
	// The name is the cluster's: b refuses it too.
	b.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, `"name":"first"`)), http.StatusConflict, "name_taken")

	// The cluster is full: a create waits in the queue until b has room.
	queued := make(chan wireSandbox, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		st, body, _, err := a.roundTrip(ctx, "POST", "/v1/sandboxes", []byte(createBody(t, `"name":"third"`)), "application/json")
		var sb wireSandbox
		if err != nil || st != http.StatusCreated || json.Unmarshal(body, &sb) != nil {
			t.Errorf("queued create: %d %v %s", st, err, body)
		}
		queued <- sb
	}()
	testenv.WaitFor(t, time.Minute, "the create in the queue", func() bool { return nats.queued(t) == 1 })
	select {
	case sb := <-queued:
		t.Fatalf("a create into a full cluster did not wait: %+v", sb)
	default:
	}
	b.expectCLI(t, []string{"rm", "-f", onB.ID}, 0)
	third := <-queued
	b.Track(third.ID)
	if got := a.nodeOf(third.ID); got != "b" {
		t.Fatalf("the queued create %s landed on %q, want b (the node with room)", third.ID, got)
	}

	// Drain from b; a shows it.
	b.expectCLI(t, []string{"node", "drain", "a"}, 0)
	var listed []wireNode
	out := a.expectCLI(t, []string{"nodes", "--json"}, 0)
	if err := json.Unmarshal(out.stdout, &listed); err != nil || len(listed) != 2 || listed[0].Name != "a" || listed[0].State != "draining" ||
		listed[0].Sandboxes != 1 || listed[1].State != "up" || listed[1].Capacity.UsedVCPUs != vcpus {
		t.Errorf("agentbox nodes --json after the drain: %s (%v)", out.stdout, err)
	}

	// NATS gone: cluster creates refused at once and clearly; a's own
	// sandbox still works.
	nats.stop()
	testenv.WaitFor(t, time.Minute, "a notices NATS is gone", func() bool { return a.nodes() == nil })
	e := a.apiError("POST", "/v1/sandboxes", "application/json", []byte(createBody(t, "")), http.StatusServiceUnavailable, "cluster_unavailable")
	if e.Message != "NATS is unreachable: cluster creates resume when it is back" {
		t.Errorf("create without NATS: %q", e.Message)
	}
	r := a.cli(nil, "create", "--image", testenv.Image(t), "--accel", "tcg")
	if r.code != 125 || string(r.stderr) != "agentbox: NATS is unreachable: cluster creates resume when it is back\n" {
		t.Errorf("agentbox create without NATS: exit %d, stderr %q", r.code, r.stderr)
	}
	a.expectExec(onA.ID, `{"cmd":["echo","local"]}`, 0, "local\n", "")

	// NATS back: undrain a, free b, and creates work again.
	nats.start()
	testenv.WaitFor(t, 2*time.Minute, "a back in the cluster", func() bool { return len(a.nodes()) == 2 })
	a.expectCLI(t, []string{"node", "undrain", "a"}, 0)
	b.expectCLI(t, []string{"rm", "-f", third.ID}, 0)
	again := a.create(createBody(t, `"name":"again"`))
	b.Track(again.ID)
	if got := a.nodeOf(again.ID); got != "b" {
		t.Fatalf("the create after NATS came back (%s) is on %q, want b (the node with room)", again.ID, got)
	}
}

// nodeOf returns the node a sandbox lives on, as d answers for it.
func (d *daemon) nodeOf(ref string) string {
	d.t.Helper()
	var sb struct {
		Node string `json:"node"`
	}
	d.callJSON("GET", "/v1/sandboxes/"+ref, nil, http.StatusOK, &sb)
	return sb.Node
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, "pick a port", err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// expectCLI runs the agentbox CLI against d and checks its exit status.
func (d *daemon) expectCLI(t *testing.T, args []string, code int) result {
	t.Helper()
	r := d.cli(nil, args...)
	if r.code != code {
		t.Fatalf("agentbox %s: exit %d, want %d; stdout %q stderr %q", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}
