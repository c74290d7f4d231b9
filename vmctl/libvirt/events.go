package libvirt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
)

// EventKind is the kind of a domain lifecycle event, libvirt's
// virDomainEventType. The string values are stable API.
type EventKind string

// Lifecycle event kinds (libvirt VIR_DOMAIN_EVENT_*).
const (
	EventDefined     EventKind = "defined"     // a persistent config was defined (not used for transient domains)
	EventUndefined   EventKind = "undefined"   // a persistent config was removed
	EventStarted     EventKind = "started"     // the QEMU process started running the guest
	EventSuspended   EventKind = "suspended"   // vCPUs paused
	EventResumed     EventKind = "resumed"     // vCPUs resumed
	EventStopped     EventKind = "stopped"     // the QEMU process is gone; a transient domain no longer exists
	EventShutdown    EventKind = "shutdown"    // the guest initiated or completed a shutdown (precedes stopped)
	EventPMSuspended EventKind = "pmsuspended" // guest power-management suspend
	EventCrashed     EventKind = "crashed"     // guest panic reported by a pvpanic device
)

// Details of each kind, indexed by libvirt's detail number
// (virDomainEventStoppedDetailType etc. in libvirt-domain.h).
var eventDetails = map[EventKind][]string{
	EventDefined:     {"added", "updated", "renamed", "snapshot"},
	EventUndefined:   {"removed", "renamed"},
	EventStarted:     {"booted", "migrated", "restored", "snapshot", "wakeup", "recreated"},
	EventSuspended:   {"paused", "migrated", "ioerror", "watchdog", "restored", "snapshot", "api-error", "postcopy", "postcopy-failed"},
	EventResumed:     {"unpaused", "migrated", "snapshot", "postcopy", "postcopy-failed"},
	EventStopped:     {"shutdown", "destroyed", "crashed", "migrated", "saved", "failed", "snapshot", "recreated"},
	EventShutdown:    {"finished", "guest", "host"},
	EventPMSuspended: {"memory", "disk"},
	EventCrashed:     {"panicked", "crashloaded"},
}

var eventKinds = []EventKind{
	EventDefined, EventUndefined, EventStarted, EventSuspended, EventResumed,
	EventStopped, EventShutdown, EventPMSuspended, EventCrashed,
}

// DetailVanished is the Detail of a synthesized [EventStopped]: after a
// reconnection the domain no longer existed, so it stopped while the
// connection was down and libvirt's own event was lost.
const DetailVanished = "vanished"

// LifecycleEvent is one lifecycle event of one domain.
type LifecycleEvent struct {
	// Domain is the domain name.
	Domain string
	// UUID is the domain UUID in textual form.
	UUID string
	// Kind is what happened.
	Kind EventKind
	// Detail is libvirt's detail for Kind, e.g. "booted" for started;
	// "destroyed", "shutdown", "crashed" or "failed" for stopped (the
	// latter when QEMU exits on its own); or [DetailVanished]. Unknown
	// numbers are rendered as "detail-N".
	Detail string
	// Synthesized is true when the event was inferred by this package
	// after a reconnection rather than sent by libvirt.
	Synthesized bool
}

// eventFromMsg converts go-libvirt's lifecycle message.
func eventFromMsg(m golibvirt.DomainEventLifecycleMsg) LifecycleEvent {
	ev := LifecycleEvent{Domain: m.Dom.Name, UUID: formatUUID(m.Dom.UUID)}
	if m.Event >= 0 && int(m.Event) < len(eventKinds) {
		ev.Kind = eventKinds[m.Event]
	} else {
		ev.Kind = EventKind("event-" + strconv.Itoa(int(m.Event)))
	}
	if d := eventDetails[ev.Kind]; m.Detail >= 0 && int(m.Detail) < len(d) {
		ev.Detail = d[m.Detail]
	} else {
		ev.Detail = "detail-" + strconv.Itoa(int(m.Detail))
	}
	return ev
}

// watcher is one WatchLifecycle subscription. Events are queued without
// bound so that a slow reader neither loses events nor stalls the others;
// lifecycle events are rare.
type watcher struct {
	name   string
	out    chan LifecycleEvent
	notify chan struct{} // capacity 1: "queue not empty"
	cancel context.CancelFunc

	// Guarded by Conn.watchMu.
	queue    []LifecycleEvent
	alive    bool // the domain is believed to exist
	sawEvent bool
}

// WatchLifecycle returns a channel of the lifecycle events of the domain
// called name, in order. The domain need not exist yet (watch before
// CreateDomain not to miss "started"). The channel keeps delivering across
// libvirtd restarts: after a reconnection, a watched domain that was alive
// and no longer exists gets a synthesized [EventStopped] with Detail
// [DetailVanished]; other events that happened while disconnected are
// lost. The channel is closed when ctx is done or the Conn is closed.
//
// All watchers share the Conn's single libvirt subscription
// (virConnectDomainEventRegisterAny, VIR_DOMAIN_EVENT_ID_LIFECYCLE).
func (c *Conn) WatchLifecycle(ctx context.Context, name string) (<-chan LifecycleEvent, error) {
	if name == "" {
		return nil, errors.New("watch lifecycle: empty domain name")
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &watcher{
		name:   name,
		out:    make(chan LifecycleEvent),
		notify: make(chan struct{}, 1),
		cancel: cancel,
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		cancel()
		return nil, fmt.Errorf("watch lifecycle of %s: %w: %w", name, ErrUnavailable, ErrClosed)
	}
	c.watchMu.Lock()
	if c.watchers[name] == nil {
		c.watchers[name] = make(map[*watcher]struct{})
	}
	c.watchers[name][w] = struct{}{}
	c.watchMu.Unlock()

	// Learn whether the domain exists now, for the vanished check after a
	// reconnection. Best effort and only if connected: never block here.
	c.mu.Lock()
	lv := c.lv
	c.mu.Unlock()
	if lv != nil {
		_, err := c.DomainState(wctx, name)
		c.watchMu.Lock()
		if !w.sawEvent {
			w.alive = err == nil
		}
		c.watchMu.Unlock()
	}

	go c.runWatcher(wctx, w)
	return w.out, nil
}

// runWatcher forwards w's queue to w.out until ctx ends.
func (c *Conn) runWatcher(ctx context.Context, w *watcher) {
	defer close(w.out)
	defer c.removeWatcher(w)
	for {
		c.watchMu.Lock()
		q := w.queue
		w.queue = nil
		c.watchMu.Unlock()
		for _, ev := range q {
			select {
			case w.out <- ev:
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-w.notify:
		case <-ctx.Done():
			return
		}
	}
}

func (c *Conn) removeWatcher(w *watcher) {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	w.cancel()
	if set := c.watchers[w.name]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(c.watchers, w.name)
		}
	}
}

// closeAllWatchers ends every watcher; used when the Conn closes.
func (c *Conn) closeAllWatchers() {
	c.watchMu.Lock()
	var all []*watcher
	for _, set := range c.watchers {
		for w := range set {
			all = append(all, w)
		}
	}
	c.watchMu.Unlock()
	for _, w := range all {
		w.cancel()
	}
}

// dispatch queues ev on every watcher of its domain.
func (c *Conn) dispatch(ev LifecycleEvent) {
	c.log.Debug("lifecycle event", slog.String("domain", ev.Domain),
		slog.String("kind", string(ev.Kind)), slog.String("detail", ev.Detail))
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for w := range c.watchers[ev.Domain] {
		w.sawEvent = true
		switch ev.Kind {
		case EventStopped:
			w.alive = false
		case EventStarted, EventResumed, EventSuspended:
			w.alive = true
		}
		w.queue = append(w.queue, ev)
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}

// resyncChecks are the delays after a reconnection at which resync looks
// at a watched domain (added up: 0 s, 0.25 s, 0.75 s, … about 16 s): a
// restarted libvirtd still lists a domain whose QEMU died while it was
// down until its own reconnect thread has found the process gone, and it
// emits no lifecycle event for that, so one look right after the
// reconnection can miss the end.
var resyncChecks = []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second}

// resync runs after a reconnection: every watched domain believed alive
// that no longer exists gets a synthesized stopped event (resyncDomain,
// in the background, so events keep flowing meanwhile).
func (c *Conn) resync() {
	c.watchMu.Lock()
	names := make(map[string]bool)
	for name, set := range c.watchers {
		for w := range set {
			if w.alive {
				names[name] = true
			}
		}
	}
	c.watchMu.Unlock()
	for name := range names {
		go c.resyncDomain(name)
	}
}

// resyncDomain looks for name at each of resyncChecks until libvirt no
// longer knows it (then its watchers get a synthesized stopped event), a
// real stopped event arrived, the connection is lost again (the next
// reconnection resyncs) or the Conn is closed.
func (c *Conn) resyncDomain(name string) {
	for _, delay := range resyncChecks {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return
		}
		if !c.watchedAlive(name) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
		_, err := c.DomainState(ctx, name)
		cancel()
		switch {
		case errors.Is(err, ErrDomainNotFound):
			// A domain stopped after the reconnection (destroyed, powered
			// off) has its real event on the way: give it vanishGrace.
			t := time.NewTimer(vanishGrace)
			select {
			case <-t.C:
			case <-c.done:
				t.Stop()
				return
			}
			if c.watchedAlive(name) {
				c.log.Info("domain vanished while disconnected from libvirtd", slog.String("domain", name))
				c.dispatchVanished(name)
			}
			return
		case err != nil:
			return
		}
	}
}

// vanishGrace is how long resyncDomain waits for libvirt's own stopped
// event of a domain it found gone before it synthesizes one: libvirt
// sends the event of a destroy or a guest poweroff within milliseconds.
const vanishGrace = 2 * time.Second

// watchedAlive reports whether a watcher of name still believes the
// domain alive (no stopped event delivered or queued yet).
func (c *Conn) watchedAlive(name string) bool {
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for w := range c.watchers[name] {
		if w.alive {
			return true
		}
	}
	return false
}

// dispatchVanished queues a synthesized stopped event on the watchers of
// name that still believe the domain alive, so that a real stopped event
// that arrived meanwhile is not followed by a second one.
func (c *Conn) dispatchVanished(name string) {
	ev := LifecycleEvent{Domain: name, Kind: EventStopped, Detail: DetailVanished, Synthesized: true}
	c.watchMu.Lock()
	defer c.watchMu.Unlock()
	for w := range c.watchers[name] {
		if !w.alive {
			continue
		}
		w.alive = false
		w.queue = append(w.queue, ev)
		select {
		case w.notify <- struct{}{}:
		default:
		}
	}
}
