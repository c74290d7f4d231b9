package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Headers of a create message. The body is the api.CreateSandboxRequest.
const (
	hdrReply  = "Agentbox-Reply"  // the creator's inbox for notices
	hdrCaller = "Agentbox-Caller" // api.Caller.ID of the create's caller
	hdrTenant = "Agentbox-Tenant" // the caller's tenant, "" for none
	hdrOrigin = "Agentbox-Origin" // the node the create came in at
)

// notice is what the node that took a create tells its creator, as a
// NATS request to the creator's inbox; the creator answers "ok" while it
// still waits for it, anything else (or no one) means it gave up.
type notice struct {
	// Kind is noticeTaken (a node with room fetched it and creates it),
	// noticeRequeued (it went back to the queue: the node's room was
	// taken meanwhile) or noticeResult.
	Kind    string       `json:"kind"`
	Node    string       `json:"node"`
	Sandbox *api.Sandbox `json:"sandbox,omitempty"`
	Error   *wireError   `json:"error,omitempty"`
}

const (
	noticeTaken    = "taken"
	noticeRequeued = "requeued"
	noticeResult   = "result"
)

// wireError is an API error as it travels from the creating node: the
// creator answers its caller with the same status, code and details.
type wireError struct {
	Status  int            `json:"status"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// classOf returns the create's priority class.
func (n *Node) classOf(ctx context.Context, req api.CreateSandboxRequest) (class, error) {
	p := PriorityNormal
	if n.cfg.Priority != nil {
		if q := n.cfg.Priority(ctx, req); q != "" {
			p = q
		}
	}
	for _, c := range classes {
		if c.name == p {
			return c, nil
		}
	}
	return class{}, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("priority %q: use high, normal or low", p))
}

// Place implements daemon.Cluster: it claims the create's name in the
// cluster, queues the create in its priority class's stream and waits
// for a node with room to take it (Config.QueueTimeout; the wait starts
// over if the create is requeued) and make it (until ctx ends). Errors:
// the create's own (as the creating node answered it), ErrNameTaken,
// ErrQueueTimeout (429), ErrUnavailable (503: NATS is unreachable, at
// once), ctx's.
func (n *Node) Place(ctx context.Context, req api.CreateSandboxRequest) (_ api.Sandbox, err error) {
	h, err := n.handles()
	if err != nil {
		return api.Sandbox{}, err
	}
	c, err := n.classOf(ctx, req)
	if err != nil {
		return api.Sandbox{}, err
	}
	inbox := n.nc.NewRespInbox()
	if req.Name != "" {
		cl, err := n.claimName(ctx, req.Name, time.Now().Add(n.cfg.QueueTimeout), inbox)
		if err != nil {
			return api.Sandbox{}, err
		}
		defer func() {
			if err != nil {
				n.releaseClaim(context.WithoutCancel(ctx), cl)
			}
		}()
		sb, err := n.placeQueued(ctx, h, c, inbox, req)
		if err != nil {
			return api.Sandbox{}, err
		}
		if err := n.bindName(context.WithoutCancel(ctx), cl, sb.ID); err != nil {
			n.log.Warn("bind the sandbox's name (reconciled later)", "sandbox", sb.ID, "name", req.Name, "err", err)
		}
		return sb, nil
	}
	return n.placeQueued(ctx, h, c, inbox, req)
}

// waiter is the creator's side of a queued create.
type waiter struct {
	mu    sync.Mutex
	state int // waitQueued, waitTaken, waitDone, waitGone
	ch    chan notice
	// taker is the node of the last taken notice while waitTaken ("" while
	// queued), takes how many taken notices came: whoever may fetch the
	// create's secrets (secrets.go).
	taker string
	takes int
}

const (
	waitQueued = iota
	waitTaken
	waitDone
	waitGone
)

// handle answers a notice "ok" if the creator still waits for it.
func (w *waiter) handle(m *nats.Msg) {
	var nt notice
	ok := json.Unmarshal(m.Data, &nt) == nil
	w.mu.Lock()
	switch {
	case !ok:
	case nt.Kind == noticeTaken && (w.state == waitQueued || w.state == waitTaken):
		// Taken again while taken: JetStream redelivered it because the
		// first taker stopped acking (it died); whichever answers first
		// wins, and the other removes what it made.
		w.state = waitTaken
		w.taker = nt.Node
		w.takes++
	case nt.Kind == noticeRequeued && w.state == waitTaken:
		w.state = waitQueued
		w.taker = ""
	case nt.Kind == noticeResult && (w.state == waitTaken || w.state == waitQueued):
		w.state = waitDone
	default:
		ok = false
	}
	w.mu.Unlock()
	if !ok {
		_ = m.Respond([]byte("gone"))
		return
	}
	select {
	case w.ch <- nt:
	default: // at most one notice per state change: never full
	}
	_ = m.Respond([]byte("ok"))
}

// giveUp ends the wait: unless force, only while the create is queued
// (a taken one is waited for); it reports whether it ended it.
func (w *waiter) giveUp(force bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == waitQueued || force && w.state == waitTaken {
		w.state = waitGone
		return true
	}
	return false
}

func (n *Node) placeQueued(ctx context.Context, h handles, c class, inbox string, req api.CreateSandboxRequest) (api.Sandbox, error) {
	w := &waiter{ch: make(chan notice, 4)}
	sub, err := n.nc.Subscribe(inbox, w.handle)
	if err != nil {
		return api.Sandbox{}, unavailable(err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // best effort
	var secretsRef string
	if len(req.Secrets) > 0 { // values never into NATS: fetched from here by the taker (secrets.go)
		ref, forget := n.secrets.hold(req.Secrets, w)
		defer forget()
		secretsRef, req.Secrets = ref, withoutValues(req.Secrets)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return api.Sandbox{}, err
	}
	msg := nats.NewMsg(c.subject)
	msg.Data = data
	msg.Header.Set(hdrReply, inbox)
	msg.Header.Set(hdrCaller, api.CallerFrom(ctx).ID)
	msg.Header.Set(hdrOrigin, n.cfg.Node)
	if secretsRef != "" {
		msg.Header.Set(hdrSecrets, secretsRef)
	}
	if n.cfg.Tenant != nil {
		if t := n.cfg.Tenant(ctx); t != "" {
			msg.Header.Set(hdrTenant, t)
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ack, err := h.js.PublishMsg(pctx, msg)
	cancel()
	if err != nil {
		return api.Sandbox{}, fmt.Errorf("%w (queue the create: %v)", ErrUnavailable, err)
	}
	_ = n.nc.Publish(subjectWake, nil)
	drop := func() { // a create nobody waits for leaves the queue
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := h.strs[c.name].DeleteMsg(dctx, ack.Sequence); err != nil {
			n.log.Debug("drop queued create", "seq", ack.Sequence, "err", err)
		}
	}
	timer := time.NewTimer(n.cfg.QueueTimeout)
	defer timer.Stop()
	check := time.NewTicker(time.Second)
	defer check.Stop()
	var lost time.Time // since when NATS is unreachable
	for {
		select {
		case <-ctx.Done():
			w.giveUp(true)
			drop()
			return api.Sandbox{}, fmt.Errorf("create abandoned by its caller: %w", ctx.Err())
		case <-timer.C:
			if w.giveUp(false) {
				drop()
				msg := fmt.Sprintf("no node of the cluster had room for the create (priority %s) within the queue timeout of %s (serve --queue-timeout): remove sandboxes, ask for less, or retry later", c.name, n.cfg.QueueTimeout)
				return api.Sandbox{}, errdefs.WithDetails(ErrQueueTimeout.WithMessage(msg),
					map[string]any{"queue_timeout_seconds": n.cfg.QueueTimeout.Seconds(), "priority": c.name})
			}
		case <-check.C:
			switch {
			case n.nc.IsConnected():
				lost = time.Time{}
			case lost.IsZero():
				lost = time.Now()
			case time.Since(lost) > 5*time.Second && w.giveUp(true):
				return api.Sandbox{}, ErrUnavailable.WithMessage("NATS became unreachable while the create was queued or being made: cluster creates resume when it is back (the create, if it was made, is removed)")
			}
		case nt := <-w.ch:
			switch nt.Kind {
			case noticeTaken:
				n.log.Debug("queued create taken", "by", nt.Node)
			case noticeRequeued:
				timer.Reset(n.cfg.QueueTimeout)
			case noticeResult:
				if nt.Error != nil {
					e := nt.Error
					return api.Sandbox{}, &api.Error{Status: e.Status, Code: e.Code, Message: e.Message, Details: e.Details}
				}
				if nt.Sandbox == nil {
					return api.Sandbox{}, fmt.Errorf("node %s answered the create with neither a sandbox nor an error", nt.Node)
				}
				return *nt.Sandbox, nil
			}
		}
	}
}

// canPull reports whether the node pulls creates now: not draining, its
// breaker closed, NATS reachable.
func (n *Node) canPull() bool {
	return !n.draining.Load() && n.brk.allow() && n.nc.IsConnected()
}

// pull is the node's puller: whenever woken (a create was queued, room
// was freed, every second) it takes creates it has room for, high before
// normal before low, up to Config.Concurrency at once.
func (n *Node) pull(ctx context.Context) {
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	for {
		for n.canPull() && n.pullOne(ctx) {
		}
		select {
		case <-ctx.Done():
			return
		case <-n.wake:
		case <-poll.C:
		}
	}
}

// pullOne takes one create if the node has a free slot and room for the
// head of a class's queue; it reports whether it took one.
func (n *Node) pullOne(ctx context.Context) bool {
	select {
	case n.slots <- struct{}{}:
	default:
		return false // the end of a create wakes the puller
	}
	h, err := n.handles()
	if err != nil {
		<-n.slots
		return false
	}
	var made [len(classes)]bool // classes whose heads are being made elsewhere: nothing to fetch
	var msg jetstream.Msg
	for msg == nil {
		i := n.head(ctx, h, &made)
		if i > 0 {
			// A higher class's create queued after that class was looked
			// at but before room was found for a lower one (room freed
			// meanwhile) comes first: look once more from the top, now
			// that the room check has passed (TestPriorityQueuedMidRound).
			i = n.head(ctx, h, &made)
		}
		if i < 0 {
			<-n.slots
			return false
		}
		batch, err := h.cons[classes[i].name].FetchNoWait(1)
		if err != nil {
			<-n.slots
			return false
		}
		for m := range batch.Messages() {
			msg = m
		}
		if msg != nil {
			break
		}
		// The head has room here but did not come. While the class has
		// creates not yet delivered (another node is taking them, or the
		// consumer has not caught up) the round ends: a lower class must
		// not take the slot meanwhile (TestPriorities); the next wake or
		// the poll, within a second, looks again. A head that is only
		// being made (delivered, not yet acked: a boot takes a while) holds
		// nobody back: the round goes on with the lower classes
		// (TestLowerClassWhileHigherMade).
		info, err := h.cons[classes[i].name].Info(ctx)
		if err != nil || info.NumPending > 0 {
			<-n.slots
			return false
		}
		made[i] = true
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer func() { <-n.slots; signal(n.wake) }()
		n.create(ctx, msg)
	}()
	return true
}

// head returns the index in classes of the first class, high before
// normal before low, not in skip, whose queue's head this node has room
// for, or -1 when there is none or NATS did not answer (no lower class
// jumps the head of one that could not be read; the next wake or poll
// retries).
func (n *Node) head(ctx context.Context, h handles, skip *[len(classes)]bool) int {
	for i, c := range classes {
		if skip[i] {
			continue
		}
		// Peek at the head: fetch only with room for it.
		raw, err := h.strs[c.name].GetMsg(ctx, 1, jetstream.WithGetMsgSubject(c.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // empty
		}
		if err != nil {
			return -1
		}
		var req api.CreateSandboxRequest
		if json.Unmarshal(raw.Data, &req) == nil && n.cfg.Local.Room(ctx, req) != nil {
			continue // a node with room takes it; maybe a smaller one of a lower class fits here
		}
		return i
	}
	return -1
}

// create makes one create it took from the queue: on the local daemon,
// telling its creator first that it took it, then the result; the
// message is acked after the reply. A create whose room went meanwhile
// goes back to the queue; one nobody waits for any more is dropped (and
// its sandbox removed if it was made).
func (n *Node) create(ctx context.Context, msg jetstream.Msg) {
	hdr := msg.Headers()
	reply := hdr.Get(hdrReply)
	var req api.CreateSandboxRequest
	if reply == "" || json.Unmarshal(msg.Data(), &req) != nil {
		n.log.Warn("dropping a malformed create message", "subject", msg.Subject())
		_ = msg.Term()
		return
	}
	if err := n.cfg.Local.Room(ctx, req); err != nil {
		_ = msg.NakWithDelay(time.Second) // no room after all: another node, or later
		return
	}
	if !n.notify(reply, notice{Kind: noticeTaken, Node: n.cfg.Node}) {
		_ = msg.Term() // its creator gave up
		return
	}
	stop := keepAlive(msg)
	if ref := hdr.Get(hdrSecrets); ref != "" {
		specs, err := n.fetchSecrets(ctx, hdr.Get(hdrOrigin), ref) // secrets.go
		if err != nil {
			stop()
			n.log.Warn("create not made: its secrets could not be fetched", "origin", hdr.Get(hdrOrigin), "err", err)
			ae := api.ErrorFrom(err)
			n.notify(reply, notice{Kind: noticeResult, Node: n.cfg.Node, Error: &wireError{Status: ae.Status, Code: ae.Code, Message: ae.Message, Details: ae.Details}})
			_ = msg.Ack()
			return
		}
		req.Secrets = specs
	}
	cctx := api.WithCaller(context.WithoutCancel(ctx), api.Caller{ID: hdr.Get(hdrCaller)})
	tenant := hdr.Get(hdrTenant)
	var (
		sb  api.Sandbox
		err error
	)
	if tenant != "" && n.cfg.WithTenant != nil {
		cctx, err = n.cfg.WithTenant(cctx, tenant)
	}
	if err == nil {
		sb, err = n.cfg.Local.CreateLocal(cctx, req)
	}
	stop()
	if errdefs.HasReason(err, api.CodeCapacity) { // another create took the room meanwhile
		if n.notify(reply, notice{Kind: noticeRequeued, Node: n.cfg.Node}) {
			_ = msg.NakWithDelay(time.Second)
		} else {
			_ = msg.Term()
		}
		return
	}
	if err != nil {
		ae := api.ErrorFrom(err)
		if ae.Status >= http.StatusInternalServerError {
			if n.brk.failure(ae.Message) {
				n.log.Warn("create breaker open: pulling no creates for a while", "err", ae.Message)
				signal(n.beat)
			}
		}
		n.notify(reply, notice{Kind: noticeResult, Node: n.cfg.Node, Error: &wireError{Status: ae.Status, Code: ae.Code, Message: ae.Message, Details: ae.Details}})
		_ = msg.Ack()
		return
	}
	n.brk.success()
	// The entry first: the caller's next request may come in at any node.
	if err := n.putEntry(cctx, sb, tenant); err != nil {
		n.log.Warn("directory entry of a new sandbox (reconciled later)", "sandbox", sb.ID, "err", err)
	}
	if !n.notify(reply, notice{Kind: noticeResult, Node: n.cfg.Node, Sandbox: &sb}) {
		n.log.Warn("removing a sandbox whose creator gave up", "sandbox", sb.ID)
		if err := n.cfg.Local.DeleteSandbox(cctx, sb.ID, true); err != nil {
			n.log.Warn("remove abandoned sandbox", "sandbox", sb.ID, "err", err)
		}
	}
	_ = msg.Ack()
}

// notify sends a notice to a creator and reports whether it still waits
// (answered "ok"); it retries while NATS reconnects.
func (n *Node) notify(reply string, nt notice) bool {
	data, _ := json.Marshal(nt)
	for try := 0; try < 5; try++ {
		m, err := n.nc.Request(reply, data, 3*time.Second)
		if err == nil {
			return string(m.Data) == "ok"
		}
		if err == nats.ErrNoResponders {
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
	return false
}

// keepAlive tells JetStream every 10 s that msg is still being worked on
// (its AckWait is 30 s; a boot takes longer); stop ends it.
func keepAlive(msg jetstream.Msg) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	return func() { close(done) }
}
