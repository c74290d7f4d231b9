package libvirt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"github.com/agentbox/agentbox/vmctl/qmp"
)

// Conn carries QMP for vmctl/qmp: commands through MonitorCommand, events
// through MonitorEvents.
var _ qmp.Transport = (*Conn)(nil)

// MonitorEvents delivers the QMP events of the domain called name (e.g.
// JOB_STATUS_CHANGE), in order, until ctx ends; then the channel is
// closed. Events are queued without bound per reader, so a slow reader
// stalls nobody.
//
// libvirt admits one QEMU monitor event registration per connection and
// domain (virConnectDomainQemuMonitorEventRegister; a second one fails
// with "event callback already tracked"), so every reader of a domain
// shares one subscription (go-libvirt's SubscribeQEMUEvents) on the Conn's
// one connection, made by the first reader and dropped after the last.
//
// Across a reconnection to libvirtd the subscription is renewed and every
// reader gets a qmp.Event with Gap set: events emitted while the
// connection was down are lost, so readers must re-read the state they
// wait for. The channel is also closed when the domain no longer exists
// at a renewal, or the Conn is closed.
//
// Known limitation of go-libvirt (v0.0.0-20261013170128): an event
// without a "data" member (STOP, RESUME, SHUTDOWN, ...) fails its decoder
// and is dropped; events with data (JOB_STATUS_CHANGE, BLOCK_JOB_*, ...)
// arrive. Lifecycle changes are better watched with [Conn.WatchLifecycle].
//
// Errors: the domain does not exist ([ErrDomainNotFound]) or libvirtd is
// unreachable ([ErrUnavailable]).
func (c *Conn) MonitorEvents(ctx context.Context, name string) (<-chan qmp.Event, error) {
	if name == "" {
		return nil, errors.New("qemu events: empty domain name")
	}
	l := &qemuListener{out: make(chan qmp.Event), notify: make(chan struct{}, 1)}
	c.qemuMu.Lock()
	if c.qemuSubs == nil {
		c.qemuSubs = make(map[string]*qemuSub)
	}
	sub := c.qemuSubs[name]
	creator := sub == nil
	var sctx context.Context
	if creator {
		sub = &qemuSub{name: name, ready: make(chan struct{}), listeners: make(map[*qemuListener]struct{})}
		sctx, sub.cancel = context.WithCancel(context.Background())
		c.qemuSubs[name] = sub
	}
	sub.listeners[l] = struct{}{}
	c.qemuMu.Unlock()

	if creator {
		ch, gen, err := c.subscribeQEMU(ctx, sctx, name)
		if err != nil {
			sub.cancel()
			c.qemuMu.Lock()
			sub.err = err
			if c.qemuSubs[name] == sub {
				delete(c.qemuSubs, name)
			}
			c.qemuMu.Unlock()
			close(sub.ready)
			return nil, err
		}
		close(sub.ready)
		go c.runQEMUSub(sctx, sub, ch, gen)
	} else {
		select {
		case <-sub.ready:
		case <-ctx.Done():
			c.detachQEMU(sub, l)
			return nil, fmt.Errorf("qemu events of %s: %w: %w", name, ErrUnavailable, ctx.Err())
		}
		if sub.err != nil {
			return nil, sub.err
		}
	}
	go c.runQEMUListener(ctx, sub, l)
	return l.out, nil
}

// qemuSub is the one QMP event subscription of a domain.
type qemuSub struct {
	name   string
	cancel context.CancelFunc // ends the libvirt subscription
	ready  chan struct{}      // closed once the first subscription is made (or failed)
	err    error              // why the first subscription failed

	// Guarded by Conn.qemuMu.
	listeners map[*qemuListener]struct{}
}

// qemuListener is one MonitorEvents reader.
type qemuListener struct {
	out    chan qmp.Event
	notify chan struct{} // capacity 1: "queue changed"

	// Guarded by Conn.qemuMu.
	queue []qmp.Event
	ended bool // no more events will be queued
}

// subscribeQEMU registers for the QMP events of name; waitCtx bounds the
// wait for libvirtd, subCtx is the subscription's lifetime.
func (c *Conn) subscribeQEMU(waitCtx, subCtx context.Context, name string) (<-chan golibvirt.DomainEvent, uint64, error) {
	backoff := 10 * time.Millisecond
	for {
		lv, gen, err := c.client(waitCtx)
		if err != nil {
			return nil, 0, err
		}
		type result struct {
			ch  <-chan golibvirt.DomainEvent
			err error
		}
		res := make(chan result, 1)
		go func() {
			// go-libvirt deregisters and closes the channel once subCtx
			// ends, or closes it when the connection drops.
			ch, err := lv.SubscribeQEMUEvents(subCtx, name)
			res <- result{ch, err}
		}()
		var r result
		select {
		case r = <-res:
		case <-waitCtx.Done():
			go func() { // nobody will read it: end it and drain it
				if r := <-res; r.ch != nil {
					for range r.ch {
					}
				}
			}()
			return nil, 0, fmt.Errorf("qemu events of %s: %w: %w", name, ErrUnavailable, waitCtx.Err())
		}
		var lerr golibvirt.Error
		switch {
		case r.err == nil:
			return r.ch, gen, nil
		case errors.As(r.err, &lerr) && containsFold(lerr.Message, "already tracked"):
			// The previous subscription of this domain is still being
			// deregistered; it goes away within a round trip.
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-waitCtx.Done():
				t.Stop()
				return nil, 0, mapErr("qemu events of "+name, r.err)
			}
			backoff = min(2*backoff, time.Second)
		case !errors.As(r.err, &lerr) && isDisconnect(r.err):
			c.waitNewer(waitCtx, gen)
		default:
			return nil, 0, mapErr("qemu events of "+name, r.err)
		}
	}
}

// runQEMUSub fans the subscription out to its listeners and renews it
// after a reconnection, until sctx ends or it cannot be renewed.
func (c *Conn) runQEMUSub(sctx context.Context, sub *qemuSub, ch <-chan golibvirt.DomainEvent, gen uint64) {
	defer c.endQEMUSub(sub)
	for {
		for ev := range ch {
			qe := qmp.Event{Name: ev.Event, Time: time.Unix(int64(ev.Seconds), int64(ev.Microseconds)*1000)}
			if len(ev.Details) > 0 && json.Valid(ev.Details) {
				qe.Data = json.RawMessage(ev.Details)
			}
			c.broadcastQEMU(sub, qe)
		}
		if sctx.Err() != nil {
			return
		}
		// The stream ended while wanted: the connection dropped.
		c.log.Debug("qemu event stream lost; renewing it after reconnection", slog.String("domain", sub.name))
		c.waitNewer(sctx, gen)
		var err error
		ch, gen, err = c.subscribeQEMU(sctx, sctx, sub.name)
		if err != nil {
			c.log.Debug("qemu event stream not renewed", slog.String("domain", sub.name), slog.Any("err", err))
			return
		}
		c.broadcastQEMU(sub, qmp.Event{Gap: true})
	}
}

func (c *Conn) broadcastQEMU(sub *qemuSub, ev qmp.Event) {
	c.qemuMu.Lock()
	defer c.qemuMu.Unlock()
	for l := range sub.listeners {
		l.queue = append(l.queue, ev)
		select {
		case l.notify <- struct{}{}:
		default:
		}
	}
}

// endQEMUSub marks every listener of sub ended and forgets sub.
func (c *Conn) endQEMUSub(sub *qemuSub) {
	c.qemuMu.Lock()
	defer c.qemuMu.Unlock()
	if c.qemuSubs[sub.name] == sub {
		delete(c.qemuSubs, sub.name)
	}
	for l := range sub.listeners {
		l.ended = true
		select {
		case l.notify <- struct{}{}:
		default:
		}
	}
}

// runQEMUListener forwards l's queue to l.out until ctx ends or the
// subscription ended and the queue is empty.
func (c *Conn) runQEMUListener(ctx context.Context, sub *qemuSub, l *qemuListener) {
	defer close(l.out)
	defer c.detachQEMU(sub, l)
	for {
		c.qemuMu.Lock()
		q, ended := l.queue, l.ended
		l.queue = nil
		c.qemuMu.Unlock()
		for _, ev := range q {
			select {
			case l.out <- ev:
			case <-ctx.Done():
				return
			}
		}
		if ended && len(q) == 0 {
			return
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-l.notify:
		case <-ctx.Done():
			return
		}
	}
}

// detachQEMU removes l from sub; the last listener ends the subscription.
func (c *Conn) detachQEMU(sub *qemuSub, l *qemuListener) {
	c.qemuMu.Lock()
	defer c.qemuMu.Unlock()
	delete(sub.listeners, l)
	if len(sub.listeners) == 0 {
		if c.qemuSubs[sub.name] == sub {
			delete(c.qemuSubs, sub.name)
		}
		sub.cancel()
	}
}

// QEMU's error replies are told apart from transport failures by vmctl/qmp.
var _ qmp.ReplyError = (*QMPError)(nil)
