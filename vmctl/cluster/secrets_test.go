package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// natsTap records every message published in the test account (a
// subscription to ">": creates, JetStream API calls and their answers,
// KV writes, notices, wakes).
type natsTap struct {
	mu   sync.Mutex
	msgs []*nats.Msg
}

func tapNATS(t *testing.T, nc *natsCluster) *natsTap {
	t.Helper()
	conn, err := nats.Connect(nc.urls()[0], nats.Token(testNATSToken))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	tap := &natsTap{}
	if _, err := conn.Subscribe(">", func(m *nats.Msg) {
		tap.mu.Lock()
		tap.msgs = append(tap.msgs, m)
		tap.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return tap
}

// raw is a message as bytes: subject, headers and data.
func raw(subject string, h nats.Header, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(subject + "\n")
	for k, vs := range h {
		b.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	b.Write(data)
	return b.Bytes()
}

// find returns the subjects of the tapped messages holding needle, and
// the first create message (subject agentbox.create.*) with the secrets
// header.
func (tap *natsTap) find(needle []byte) (holding []string, create *api.CreateSandboxRequest) {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	for _, m := range tap.msgs {
		if bytes.Contains(raw(m.Subject, m.Header, m.Data), needle) {
			holding = append(holding, m.Subject)
		}
		if strings.HasPrefix(m.Subject, "agentbox.create.") && m.Subject != subjectWake && m.Header.Get(hdrSecrets) != "" && create == nil {
			create = &api.CreateSandboxRequest{}
			if err := json.Unmarshal(m.Data, create); err != nil {
				create = nil
			}
		}
	}
	return holding, create
}

// storedHolding reads every message of every stream (the create streams,
// every KV bucket) and returns where needle is found.
func storedHolding(t *testing.T, nc *natsCluster, needle []byte) (where []string, read int) {
	t.Helper()
	conn, err := nats.Connect(nc.urls()[0], nats.Token(testNATSToken))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js, err := jetstream.New(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	names := js.StreamNames(ctx)
	var streams []string
	for name := range names.Name() {
		streams = append(streams, name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			read++
			if bytes.Contains(raw(m.Subject, m.Header, m.Data), needle) {
				where = append(where, fmt.Sprintf("%s #%d", name, seq))
			}
		}
	}
	return where, read
}

// peerFetch is Config.FetchSecrets of node self over the nodes' own
// TakeSecrets, as the peer API answers it (clusterproxy tests the HTTP
// of it); calls counts the fetches.
type peerFetch struct {
	mu    sync.Mutex
	nodes map[string]*Node
	calls int
	fail  error // if set, every fetch fails with it
}

func (p *peerFetch) fetcher(self string) SecretsFetcher {
	return func(ctx context.Context, origin NodeInfo, ref string) ([]api.SecretSpec, error) {
		p.mu.Lock()
		p.calls++
		n, fail := p.nodes[origin.Name], p.fail
		p.mu.Unlock()
		if fail != nil {
			return nil, fail
		}
		if n == nil {
			return nil, fmt.Errorf("dial %s: connection refused", origin.Advertise)
		}
		return n.TakeSecrets(ctx, ref, self)
	}
}

func (p *peerFetch) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func made(f *fakeLocal) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates
}

func (p *peerFetch) add(n *Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nodes[n.Self()] = n
}

func secretReq(name, value string) api.CreateSandboxRequest {
	req := apiReq(name, 1)
	req.Secrets = []api.SecretSpec{{Name: "API_KEY", Value: value, Hosts: []string{"api.example.test"}}}
	return req
}

func setCapacity(f *fakeLocal, vcpus int) {
	f.mu.Lock()
	f.capacity = vcpus
	f.mu.Unlock()
}

// A create's secret values never go into NATS: not in any message
// published while it is queued, taken and made (the tap), nor in any
// stream or bucket afterwards; the node that makes it gets them whole,
// fetched from the node it came in at, which holds nothing once the
// create is answered. A node that takes its own create reads them
// without a fetch.
func TestSecretsNeverInNATS(t *testing.T) {
	nc := startNATS(t, 3)
	tap := tapNATS(t, nc)
	peers := &peerFetch{nodes: map[string]*Node{}}
	la, lb := newFakeLocal(0), newFakeLocal(1)
	a := joinNode(t, nc, "a", la, func(c *Config) { c.FetchSecrets = peers.fetcher("a") })
	b := joinNode(t, nc, "b", lb, func(c *Config) { c.FetchSecrets = peers.fetcher("b") })
	peers.add(a)
	peers.add(b)
	ctx := context.Background()

	const value = "s3cret-value-9f8e7d6c5b4a"
	sb, err := a.Place(ctx, secretReq("remote", value))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := a.Lookup(ctx, "remote"); err != nil || e.Node != "b" || e.ID != sb.ID {
		t.Fatalf("remote placed at %+v, %v; want b", e, err)
	}
	if n := a.secrets.count(); n != 0 {
		t.Errorf("a still holds the secrets of %d creates after the answer", n)
	}
	// Once b is full, a's own create is a's: no fetch.
	setCapacity(la, 1)
	if _, err := a.Place(ctx, secretReq("own", value+"-own")); err != nil {
		t.Fatal(err)
	}
	if e, err := a.Lookup(ctx, "own"); err != nil || e.Node != "a" {
		t.Fatalf("own placed at %+v, %v; want a", e, err)
	}
	want := func(v string) [][]api.SecretSpec {
		return [][]api.SecretSpec{{{Name: "API_KEY", Value: v, Hosts: []string{"api.example.test"}}}}
	}
	for _, c := range []struct {
		local *fakeLocal
		want  [][]api.SecretSpec
	}{{lb, want(value)}, {la, want(value + "-own")}} {
		c.local.mu.Lock()
		got := c.local.secrets
		c.local.mu.Unlock()
		if !slices.EqualFunc(got, c.want, func(x, y []api.SecretSpec) bool {
			return slices.EqualFunc(x, y, func(p, q api.SecretSpec) bool {
				return p.Name == q.Name && p.Value == q.Value && slices.Equal(p.Hosts, q.Hosts)
			})
		}) {
			t.Errorf("CreateLocal got secrets %+v, want %+v", got, c.want)
		}
	}
	if c := peers.count(); c != 1 {
		t.Errorf("%d fetches, want 1 (b's)", c)
	}
	if a.secrets.count()+b.secrets.count() != 0 {
		t.Errorf("secrets still held: a %d, b %d", a.secrets.count(), b.secrets.count())
	}

	testenv.WaitFor(t, 30*time.Second, "the queue empty", func() bool { return queued(t, a, PriorityNormal) == 0 })
	holding, queuedReq := tap.find([]byte(value))
	if len(holding) != 0 {
		t.Errorf("the secret value went through NATS on %q", holding)
	}
	// The queued create names its secrets and hosts, without values: an
	// agentbox that does not fetch them refuses it.
	switch {
	case queuedReq == nil:
		t.Error("the tap saw no create message with a secrets reference: it taps nothing")
	case len(queuedReq.Secrets) != 1 || queuedReq.Secrets[0].Name != "API_KEY" || queuedReq.Secrets[0].Value != "" || !slices.Equal(queuedReq.Secrets[0].Hosts, []string{"api.example.test"}):
		t.Errorf("queued secrets %+v, want API_KEY for api.example.test without a value", queuedReq.Secrets)
	}
	where, read := storedHolding(t, nc, []byte(value))
	if len(where) != 0 {
		t.Errorf("the secret value is stored in JetStream at %q", where)
	}
	if read == 0 {
		t.Error("no stored message read: the directory entries at least should be")
	}
}

// A taker that cannot fetch the secrets from the node the create came
// in at makes nothing, and the creator gets 503 node_unreachable naming
// that node; nothing stays held.
func TestSecretsFetchFails(t *testing.T) {
	nc := startNATS(t, 1)
	peers := &peerFetch{nodes: map[string]*Node{}, fail: errors.New("dial tcp 127.0.0.1:1: connect: connection refused")}
	la, lb := newFakeLocal(0), newFakeLocal(1)
	a := joinNode(t, nc, "a", la, nil)
	joinNode(t, nc, "b", lb, func(c *Config) { c.FetchSecrets = peers.fetcher("b") })
	_, err := a.Place(context.Background(), secretReq("x", "value-1234567890"))
	ae := api.ErrorFrom(err)
	wantMsg := `the create's secrets stay at node a, where it came in, which did not hand them over at http://a.test:7070 (dial tcp 127.0.0.1:1: connect: connection refused): the create is not made; retry it`
	if ae.Status != 503 || ae.Code != api.CodeNodeUnreachable || ae.Message != wantMsg || ae.Details["node"] != "a" {
		t.Fatalf("failed fetch: %d %s %q %v", ae.Status, ae.Code, ae.Message, ae.Details)
	}
	if lb.count() != 0 || made(lb) != 0 {
		t.Errorf("b made %d sandboxes without the secrets", made(lb))
	}
	if a.secrets.count() != 0 {
		t.Errorf("a holds %d creates' secrets after the answer", a.secrets.count())
	}
	if _, err := a.Lookup(context.Background(), "x"); !isNotFound(err) {
		t.Errorf("the failed create's name is still claimed: %v", err)
	}
}

// The node a create came in at goes away while it is queued: its
// creator gets 503 cluster_unavailable and drops the secrets; the node
// that then finds the create makes nothing and fetches nothing (nobody
// waits for it), and the queue empties.
func TestSecretsOriginGone(t *testing.T) {
	nc := startNATS(t, 1)
	peers := &peerFetch{nodes: map[string]*Node{}}
	la, lb := newFakeLocal(0), newFakeLocal(0)
	a := joinNode(t, nc, "a", la, nil)
	b := joinNode(t, nc, "b", lb, func(c *Config) { c.FetchSecrets = peers.fetcher("b") })
	peers.add(a)
	waiting := placeAsync(a, secretReq("orphan", "value-abcdefghij"), "")
	testenv.WaitFor(t, 30*time.Second, "the create queued", func() bool { return queued(t, b, PriorityNormal) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	a.Close(ctx)
	cancel()
	r := <-waiting
	if !errors.Is(r.err, errdefs.ErrUnavailable) || api.ErrorFrom(r.err).Code != api.CodeClusterUnavailable {
		t.Fatalf("creator at a gone node: %+v %v", r.sb, r.err)
	}
	if a.secrets.count() != 0 {
		t.Errorf("a holds %d creates' secrets after the answer", a.secrets.count())
	}
	setCapacity(lb, 1)
	signal(b.wake)
	testenv.WaitFor(t, 30*time.Second, "the orphan out of the queue", func() bool { return queued(t, b, PriorityNormal) == 0 })
	if made(lb) != 0 || peers.count() != 0 {
		t.Errorf("b made %d sandboxes and fetched %d times for a create nobody waits for", made(lb), peers.count())
	}
}

// Only the node the creator last saw take the create may fetch its
// secrets, once per take; a requeue and a new take allow one more; an
// unknown reference (a create that ended) is not found.
func TestTakeSecretsOnlyByTaker(t *testing.T) {
	n := &Node{cfg: Config{Node: "a"}}
	w := &waiter{ch: make(chan notice, 4)}
	specs := []api.SecretSpec{{Name: "K", Value: "v", Hosts: []string{"h.test"}}}
	ref, drop := n.secrets.hold(specs, w)
	notify := func(kind, node string) {
		data, _ := json.Marshal(notice{Kind: kind, Node: node})
		w.handle(&nats.Msg{Data: data})
		<-w.ch
	}
	take := func(node string) error {
		got, err := n.TakeSecrets(context.Background(), ref, node)
		if err == nil && (len(got) != 1 || got[0].Value != "v") {
			t.Fatalf("took %+v", got)
		}
		return err
	}
	denied := func(err error) bool { return errors.Is(err, errdefs.ErrPermissionDenied) }
	if err := take("b"); !denied(err) {
		t.Fatalf("fetch of a queued create: %v", err)
	}
	notify(noticeTaken, "b")
	if err := take("c"); !denied(err) || !strings.Contains(err.Error(), `node "c" did not take create`) {
		t.Fatalf("fetch by another node: %v", err)
	}
	if err := take("b"); err != nil {
		t.Fatal(err)
	}
	if err := take("b"); !denied(err) || !strings.Contains(err.Error(), "once per take") {
		t.Fatalf("second fetch of one take: %v", err)
	}
	notify(noticeRequeued, "b")
	if err := take("b"); !denied(err) {
		t.Fatalf("fetch of a requeued create: %v", err)
	}
	notify(noticeTaken, "c") // redelivered or requeued: another take
	if err := take("c"); err != nil {
		t.Fatal(err)
	}
	drop()
	if err := take("c"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("fetch after the create ended: %v", err)
	}
	if _, err := n.TakeSecrets(context.Background(), "0123", "b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown reference: %v", err)
	}
}

// Join refuses a NATS connection without authentication and says what
// to add; any one of token, creds, nkey, client certificate or URL user
// is enough.
func TestJoinNeedsNATSAuth(t *testing.T) {
	base := Config{Servers: []string{"nats://127.0.0.1:4222"}, Node: "a", Advertise: "https://a.test:7070", Local: newFakeLocal(1)}
	_, err := Join(context.Background(), base)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "NATS needs authentication") || !strings.Contains(err.Error(), "--nats-token-file, --nats-creds, --nats-nkey, --nats-cert and --nats-key, or user:password@ in the --cluster URL") {
		t.Fatalf("no auth: %v", err)
	}
	for _, c := range []struct {
		name string
		set  func(*Config)
	}{
		{"token", func(c *Config) { c.Token = "t" }},
		{"creds", func(c *Config) { c.CredsFile = "/x.creds" }},
		{"nkey", func(c *Config) { c.NKeyFile = "/x.nk" }},
		{"url user", func(c *Config) { c.Servers = []string{"nats://u:p@127.0.0.1:4222"} }},
		{"url token", func(c *Config) { c.Servers = []string{"nats://127.0.0.1:4222", "nats://tok@127.0.0.1:4223"} }},
	} {
		cfg := base
		c.set(&cfg)
		if err := CheckNATSAuth(cfg); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}
