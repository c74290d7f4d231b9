package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// queued returns how many creates wait in a class's stream.
func queued(t *testing.T, n *Node, class string) uint64 {
	t.Helper()
	h, err := n.handles()
	if err != nil {
		return 0
	}
	// Info caches what it reads in the stream handle, which the node's
	// puller reads at the same time (GetMsg): ask through a handle of the
	// test's own (a jetstream.Stream is not safe for concurrent use).
	var name string
	for _, c := range classes {
		if c.name == class {
			name = c.stream
		}
	}
	s, err := h.js.Stream(context.Background(), name)
	if err != nil {
		return 0
	}
	info, err := s.Info(context.Background())
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

type placed struct {
	sb  api.Sandbox
	err error
}

func placeAsync(n *Node, req api.CreateSandboxRequest, prio string) chan placed {
	ch := make(chan placed, 1)
	go func() {
		ctx := context.Background()
		if prio != "" {
			ctx = context.WithValue(ctx, prioKey{}, prio)
		}
		sb, err := n.Place(ctx, req)
		ch <- placed{sb, err}
	}()
	return ch
}

type prioKey struct{}

func prioFromCtx(ctx context.Context, _ api.CreateSandboxRequest) string {
	p, _ := ctx.Value(prioKey{}).(string)
	return p
}

// A full cluster queues: the create waits until a removal makes room,
// then proceeds; one that waits past the queue timeout gets 429
// queue_timeout and leaves nothing in the queue.
func TestQueueWaitsForRoom(t *testing.T) {
	nc := startNATS(t, 3)
	la, lb := newFakeLocal(2), newFakeLocal(2)
	a := joinNode(t, nc, "a", la, nil)
	joinNode(t, nc, "b", lb, nil)
	ctx := context.Background()
	for range 4 { // fills a and b: the creates in at a land on b when a is full
		if _, err := a.Place(ctx, apiReq("", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if la.count() != 2 || lb.count() != 2 {
		t.Fatalf("a has %d, b %d sandboxes", la.count(), lb.count())
	}
	waiting := placeAsync(a, apiReq("late", 1), "")
	testenv.WaitFor(t, 30*time.Second, "the create queued", func() bool { return queued(t, a, PriorityNormal) == 1 })
	select {
	case r := <-waiting:
		t.Fatalf("create into a full cluster returned: %+v %v", r.sb, r.err)
	default:
	}
	if err := lb.DeleteSandbox(ctx, lb.any(), true); err != nil {
		t.Fatal(err)
	}
	r := <-waiting
	if r.err != nil {
		t.Fatal(r.err)
	}
	if e, err := a.Lookup(ctx, "late"); err != nil || e.Node != "b" || e.ID != r.sb.ID {
		t.Fatalf("late placed at %+v, %v; want b", e, err)
	}
	// Acked after the answer: the queue empties right after.
	testenv.WaitFor(t, 30*time.Second, "the queue empty", func() bool { return queued(t, a, PriorityNormal) == 0 })

	// The queue timeout: 429 queue_timeout, nothing left behind.
	short := joinNode(t, nc, "short", newFakeLocal(0), func(c *Config) { c.QueueTimeout = time.Second })
	_, err := short.Place(ctx, apiReq("never", 1))
	ae := api.ErrorFrom(err)
	if ae.Status != 429 || ae.Code != api.CodeQueueTimeout || !strings.Contains(ae.Message, "within the queue timeout of 1s") {
		t.Fatalf("full cluster: %d %s %q", ae.Status, ae.Code, ae.Message)
	}
	if q := queued(t, a, PriorityNormal); q != 0 {
		t.Fatalf("%d creates left in the queue after the timeout", q)
	}
	if _, err := a.Lookup(ctx, "never"); !isNotFound(err) {
		t.Fatalf("the timed-out create's name is still claimed: %v", err)
	}
	if la.count()+lb.count() != 4 {
		t.Fatalf("%d sandboxes, want 4", la.count()+lb.count())
	}
}

// High is served before low when both wait.
func TestPriorities(t *testing.T) {
	nc := startNATS(t, 3)
	local := newFakeLocal(1)
	a := joinNode(t, nc, "a", local, func(c *Config) { c.Priority = prioFromCtx })
	ctx := context.Background()
	first, err := a.Place(ctx, apiReq("", 1))
	if err != nil {
		t.Fatal(err)
	}
	low := placeAsync(a, apiReq("low", 1), PriorityLow)
	testenv.WaitFor(t, 30*time.Second, "low queued", func() bool { return queued(t, a, PriorityLow) == 1 })
	high := placeAsync(a, apiReq("high", 1), PriorityHigh)
	testenv.WaitFor(t, 30*time.Second, "high queued", func() bool { return queued(t, a, PriorityHigh) == 1 })

	local.DeleteSandbox(ctx, first.ID, true)
	r := <-high
	if r.err != nil || r.sb.Name != "high" {
		t.Fatalf("high: %+v %v", r.sb, r.err)
	}
	select {
	case r := <-low:
		t.Fatalf("low placed while the node held high: %+v %v", r.sb, r.err)
	default:
	}
	local.DeleteSandbox(ctx, r.sb.ID, true)
	if r := <-low; r.err != nil || r.sb.Name != "low" {
		t.Fatalf("low: %+v %v", r.sb, r.err)
	}
	if _, err := a.Place(context.WithValue(ctx, prioKey{}, "urgent"), apiReq("", 1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unknown priority: %v", err)
	}
}

// A high create queued while the puller's round is past the high class
// (it saw that queue empty) and room frees before the round's room check
// of a lower class's head still goes first: the round looks again from
// the top before it takes a lower class. The fake's room check is where
// the interleaving is forced: it queues the high create and frees the
// room the first time it is asked about the low one.
func TestPriorityQueuedMidRound(t *testing.T) {
	nc := startNATS(t, 3)
	local := newFakeLocal(1)
	a := joinNode(t, nc, "a", local, func(c *Config) { c.Priority = prioFromCtx })
	ctx := context.Background()
	first, err := a.Place(ctx, apiReq("", 1))
	if err != nil {
		t.Fatal(err)
	}
	var (
		once sync.Once
		high chan placed
	)
	queuedHigh := make(chan struct{})
	local.mu.Lock() // the puller runs: the hook is read under the fake's lock
	local.onRoom = func(req api.CreateSandboxRequest) {
		if req.Name != "low" {
			return
		}
		once.Do(func() {
			high = placeAsync(a, apiReq("high", 1), PriorityHigh)
			for queued(t, a, PriorityHigh) != 1 {
				time.Sleep(5 * time.Millisecond) // on the puller's goroutine: no t.Fatal here
			}
			local.DeleteSandbox(ctx, first.ID, true)
			close(queuedHigh)
		})
	}
	local.mu.Unlock()
	low := placeAsync(a, apiReq("low", 1), PriorityLow)
	testenv.Receive(t, 30*time.Second, "the puller's room check of the low create", queuedHigh)
	r := testenv.Receive(t, 40*time.Second, "the high create's result", high)
	if r.err != nil || r.sb.Name != "high" {
		t.Fatalf("high: %+v %v", r.sb, r.err)
	}
	select {
	case r := <-low:
		t.Fatalf("low placed while the node held high: %+v %v", r.sb, r.err)
	default:
	}
	local.DeleteSandbox(ctx, r.sb.ID, true)
	if r := testenv.Receive(t, 40*time.Second, "the low create's result", low); r.err != nil || r.sb.Name != "low" {
		t.Fatalf("low: %+v %v", r.sb, r.err)
	}
}

// A higher class's create that is being made (taken, not yet acked: a
// boot takes a while) holds no lower class back: a low create queued
// meanwhile is placed on the room left, before the high one is made.
func TestLowerClassWhileHigherMade(t *testing.T) {
	nc := startNATS(t, 3)
	local := newFakeLocal(2)
	release := make(chan struct{})
	local.hold = func(req api.CreateSandboxRequest) {
		if req.Name == "high" {
			<-release
		}
	}
	a := joinNode(t, nc, "a", local, func(c *Config) { c.Priority = prioFromCtx })
	high := placeAsync(a, apiReq("high", 1), PriorityHigh)
	testenv.WaitFor(t, 30*time.Second, "the high create being made", func() bool { return local.count() == 1 })
	low := placeAsync(a, apiReq("low", 1), PriorityLow)
	r := testenv.Receive(t, 30*time.Second, "the low create placed while the high one is made", low)
	if r.err != nil || r.sb.Name != "low" {
		t.Fatalf("low: %+v %v", r.sb, r.err)
	}
	select {
	case r := <-high:
		t.Fatalf("high returned while held: %+v %v", r.sb, r.err)
	default:
	}
	close(release)
	if r := testenv.Receive(t, 30*time.Second, "the high create", high); r.err != nil || r.sb.Name != "high" {
		t.Fatalf("high: %+v %v", r.sb, r.err)
	}
}

// A node whose creates fail three times in a row stops pulling and says
// why; the others go on placing.
func TestBreaker(t *testing.T) {
	nc := startNATS(t, 3)
	bad := newFakeLocal(8)
	bad.fail = errdefs.ErrInternal.WithMessage("qemu exploded")
	a := joinNode(t, nc, "a", bad, func(c *Config) { c.QueueTimeout = 2 * time.Second })
	ctx := context.Background()
	for i := range 3 {
		_, err := a.Place(ctx, apiReq("", 1))
		if ae := api.ErrorFrom(err); ae.Status != 500 || ae.Message != "qemu exploded" {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "a breaker-open", func() bool {
		nodes, err := a.ListNodes(ctx)
		return err == nil && nodes[0].State == NodeBreakerOpen
	})
	nodes, _ := a.ListNodes(ctx)
	if !strings.Contains(nodes[0].Reason, "creates failed repeatedly") || !strings.Contains(nodes[0].Reason, "qemu exploded") {
		t.Fatalf("reason %q", nodes[0].Reason)
	}
	// Its breaker open, a pulls nothing: with no other node the create
	// times out in the queue.
	if _, err := a.Place(ctx, apiReq("", 1)); !api.HasCode(api.ErrorFrom(err), api.CodeQueueTimeout) {
		t.Fatalf("create with the only node's breaker open: %v", err)
	}
	// A healthy node takes the creates that come in at a.
	good := newFakeLocal(8)
	joinNode(t, nc, "b", good, nil)
	if _, err := a.Place(ctx, apiReq("", 1)); err != nil {
		t.Fatal(err)
	}
	if good.count() != 1 || bad.creates != 0 {
		t.Fatalf("b made %d, a %d", good.count(), bad.creates)
	}
}

func TestBreakerCooldownDoubles(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(3, 30*time.Second)
	b.now = func() time.Time { return now }
	for range 2 {
		if b.failure("x") {
			t.Fatal("opened early")
		}
	}
	if !b.failure("boom") || b.allow() {
		t.Fatal("not open after 3")
	}
	if msg, until := b.status(); msg != "boom" || !until.Equal(now.Add(30*time.Second)) {
		t.Fatalf("status %q %v", msg, until)
	}
	now = now.Add(31 * time.Second)
	if !b.allow() {
		t.Fatal("still open after the cooldown")
	}
	if !b.failure("again") { // half open: one failure reopens, for twice as long
		t.Fatal("did not reopen")
	}
	if _, until := b.status(); !until.Equal(now.Add(60 * time.Second)) {
		t.Fatalf("second cooldown until %v", until)
	}
	now = now.Add(61 * time.Second)
	b.success()
	if msg, _ := b.status(); msg != "" || !b.allow() {
		t.Fatal("not closed after a success")
	}
}

// A drained node pulls nothing; its sandboxes stay. Undrain resumes.
func TestDrain(t *testing.T) {
	nc := startNATS(t, 3)
	la, lb := newFakeLocal(8), newFakeLocal(8)
	a := joinNode(t, nc, "a", la, nil)
	b := joinNode(t, nc, "b", lb, nil)
	ctx := context.Background()
	if _, err := a.Place(ctx, apiReq("", 1)); err != nil {
		t.Fatal(err)
	}
	held := la.count()
	node, err := b.DrainNode(ctx, "a", true) // from another node
	if err != nil || node.State != NodeDraining {
		t.Fatalf("drain: %+v %v", node, err)
	}
	testenv.WaitFor(t, 30*time.Second, "a stops pulling", func() bool { return a.draining.Load() })
	for range 6 {
		if _, err := a.Place(ctx, apiReq("", 1)); err != nil {
			t.Fatal(err)
		}
	}
	if la.count() != held || lb.count() != 7-held {
		t.Fatalf("a has %d (had %d), b %d", la.count(), held, lb.count())
	}
	testenv.WaitFor(t, 30*time.Second, "a listed draining with its sandboxes", func() bool {
		nodes, err := b.ListNodes(ctx)
		return err == nil && nodes[0].State == NodeDraining && nodes[0].Sandboxes == held
	})
	if _, err := a.DrainNode(ctx, "a", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DrainNode(ctx, "b", true); err != nil {
		t.Fatal(err)
	}
	// Each node hears of its drain from the bucket: wait for both (a
	// create queued before b heard would be b's to take).
	testenv.WaitFor(t, 30*time.Second, "a pulls again and b stops", func() bool { return !a.draining.Load() && b.draining.Load() })
	if _, err := b.Place(ctx, apiReq("", 1)); err != nil {
		t.Fatal(err)
	}
	if la.count() != held+1 {
		t.Fatalf("undrained a has %d", la.count())
	}
	if _, err := a.DrainNode(ctx, "ghost", true); !isNotFound(err) {
		t.Fatalf("drain of an unknown node: %v", err)
	}
}

// The creator's side of the notices: taken (again, after a redelivery),
// requeued, result; nothing after it gave up.
func TestWaiterStates(t *testing.T) {
	send := func(w *waiter, kind string) bool {
		data, _ := json.Marshal(notice{Kind: kind})
		w.handle(&nats.Msg{Data: data})
		select {
		case <-w.ch:
			return true
		default:
			return false
		}
	}
	w := &waiter{ch: make(chan notice, 4)}
	for _, step := range []struct {
		kind string
		ok   bool
	}{
		{noticeRequeued, false}, {noticeTaken, true}, {noticeTaken, true}, {noticeRequeued, true},
		{noticeTaken, true}, {noticeResult, true}, {noticeResult, false}, {noticeTaken, false},
	} {
		if got := send(w, step.kind); got != step.ok {
			t.Fatalf("%s accepted = %v, want %v", step.kind, got, step.ok)
		}
	}
	w = &waiter{ch: make(chan notice, 4)}
	send(w, noticeTaken)
	if w.giveUp(false) {
		t.Fatal("the queue timeout ended a taken create's wait")
	}
	if !w.giveUp(true) || send(w, noticeResult) {
		t.Fatal("a result after the caller went away was accepted")
	}
}

type tenantKey struct{}

// The caller's tenant and identity travel with the queued create: the
// creating node restores them (WithTenant, api.WithCaller) and the
// directory entry carries the tenant; one it does not know is refused.
func TestTenantTravels(t *testing.T) {
	nc := startNATS(t, 1)
	local := newFakeLocal(4)
	var seen []string
	local.onCreate = func(ctx context.Context) {
		tn, _ := ctx.Value(tenantKey{}).(string)
		seen = append(seen, api.CallerFrom(ctx).ID+" "+tn)
	}
	a := joinNode(t, nc, "a", local, func(c *Config) {
		c.Tenant = func(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s }
		c.WithTenant = func(ctx context.Context, name string) (context.Context, error) {
			if name != "t1" {
				return nil, errdefs.ErrPermissionDenied.WithMessage("tenant " + name + " is not known here")
			}
			return context.WithValue(ctx, tenantKey{}, name), nil
		}
	})
	ctx := api.WithCaller(context.WithValue(context.Background(), tenantKey{}, "t1"), api.Caller{ID: "token"})
	sb, err := a.Place(ctx, apiReq("mine", 1))
	if err != nil {
		t.Fatal(err)
	}
	if e, err := a.Lookup(ctx, "mine"); err != nil || e.Tenant != "t1" || e.ID != sb.ID {
		t.Fatalf("entry %+v, %v", e, err)
	}
	_, err = a.Place(context.WithValue(context.Background(), tenantKey{}, "t2"), apiReq("", 1))
	if ae := api.ErrorFrom(err); ae.Status != 403 || ae.Message != "tenant t2 is not known here" {
		t.Fatalf("unknown tenant: %v", err)
	}
	if len(seen) != 1 || seen[0] != "token t1" {
		t.Fatalf("creates saw %q", seen)
	}
}
