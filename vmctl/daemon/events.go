package daemon

import (
	"context"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// hub fans sandbox events out to the API's event streams. A subscriber
// that cannot keep up (256 events behind) is dropped rather than slowing
// the daemon; its stream ends and the client reconnects.
type hub struct {
	// owner, if set, names the tenant of an event's sandbox that does not
	// name it (a tenant's stream carries only its own: Events).
	owner func(id string) string

	mu     sync.Mutex
	subs   map[chan api.Event]struct{}
	closed bool
}

func newHub() *hub { return &hub{subs: map[chan api.Event]struct{}{}} }

func (h *hub) publish(ev api.Event) {
	if ev.Tenant == "" && ev.Sandbox != "" && h.owner != nil {
		ev.Tenant = h.owner(ev.Sandbox)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- ev:
		default:
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) subscribe() (chan api.Event, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ch := make(chan api.Event, 256)
	if h.closed {
		close(ch)
		return ch, func() {}
	}
	h.subs[ch] = struct{}{}
	return ch, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := h.subs[ch]; ok {
			delete(h.subs, ch)
			close(ch)
		}
	}
}

func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		delete(h.subs, ch)
		close(ch)
	}
}

// Events implements backend.Backend: sandbox events until ctx ends. It ends
// with 503 when the daemon shuts down or the client fell too far behind.
func (c *core) Events(ctx context.Context, emit func(api.Event) error) error {
	ch, cancel := c.events.subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-ch:
			if !ok {
				return errdefs.ErrUnavailable.WithMessage("event stream ended (daemon shutting down or the client fell behind): reconnect")
			}
			if !eventSeen(ctx, ev) { // tenants.go
				continue
			}
			if err := emit(ev); err != nil {
				return err
			}
		}
	}
}
