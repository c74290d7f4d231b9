// Package libvirt is agentbox's libvirt driver: one RPC connection to the
// local libvirtd (github.com/digitalocean/go-libvirt, pure Go), shared by
// every sandbox. It creates and destroys transient domains, reports their
// state, fans one lifecycle-event subscription out to per-domain watchers,
// and passes QMP and guest-agent commands through libvirt.
//
// The connection survives libvirtd restarts: when the socket drops, Conn
// reconnects with backoff, subscribes to events again and keeps watchers
// open. Calls made meanwhile wait for the reconnection up to their
// context, then fail with an error wrapping [ErrUnavailable]. QEMU
// processes are not children of libvirtd, so running domains survive a
// libvirtd restart.
package libvirt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Config configures [Connect]. The zero value connects to the system
// libvirtd.
type Config struct {
	// URI is the libvirt connection URI; default [DefaultURI]
	// ("qemu:///system"). Only local URIs of the qemu driver are
	// supported: qemu:///system, qemu:///session, qemu+unix:///...,
	// optionally with ?socket=PATH.
	URI string
	// Socket overrides the unix socket path derived from URI.
	Socket string
	// Logger receives connection events (lost, reconnected) with the
	// fixed keys "uri" and "domain". Default: discard.
	Logger *slog.Logger
	// DialTimeout bounds one dial of the socket; default 5s.
	DialTimeout time.Duration
	// MaxBackoff caps the delay between reconnection attempts, which
	// starts at 50ms and doubles; default 2s.
	MaxBackoff time.Duration
}

const (
	defaultDialTimeout = 5 * time.Second
	defaultMaxBackoff  = 2 * time.Second
	minBackoff         = 50 * time.Millisecond
)

// Conn is a connection to libvirtd shared by all sandboxes. It is safe for
// concurrent use. Create it with [Connect]; release it with [Conn.Close].
type Conn struct {
	ep   endpoint
	cfg  Config
	log  *slog.Logger
	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu     sync.Mutex
	lv     *golibvirt.Libvirt // nil while disconnected
	gen    uint64             // incremented on every successful (re)connection
	ready  chan struct{}      // closed while lv != nil; replaced on disconnect
	lost   chan struct{}      // closed when the connection of generation gen drops
	closed bool

	watchMu  sync.Mutex
	watchers map[string]map[*watcher]struct{}

	// qemuMu guards qemuSubs: one shared QMP event subscription per
	// domain (qmpevents.go).
	qemuMu   sync.Mutex
	qemuSubs map[string]*qemuSub
}

// Connect dials libvirtd, opens cfg.URI and subscribes to domain lifecycle
// events. It fails (wrapping [ErrUnavailable]) if libvirtd cannot be
// reached now; later losses of the connection are repaired in the
// background until [Conn.Close].
func Connect(ctx context.Context, cfg Config) (*Conn, error) {
	ep, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = defaultDialTimeout
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = defaultMaxBackoff
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Conn{
		ep:       ep,
		cfg:      cfg,
		log:      log.With(slog.String("uri", ep.uri)),
		done:     make(chan struct{}),
		ready:    make(chan struct{}),
		watchers: make(map[string]map[*watcher]struct{}),
	}
	lv, events, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.setConnected(lv)
	c.wg.Add(1)
	go c.supervise(lv, events)
	return c, nil
}

// Close stops reconnecting, closes every watcher channel and disconnects
// from libvirtd. Domains keep running. Calls made after Close fail with
// [ErrClosed] and [ErrUnavailable]. Close is idempotent.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// dial connects once and subscribes to lifecycle events. The events
// channel closes when the connection drops (go-libvirt shuts event streams
// down on disconnect) or when the subscription's context ends.
func (c *Conn) dial(ctx context.Context) (*golibvirt.Libvirt, <-chan golibvirt.DomainEventLifecycleMsg, error) {
	type result struct {
		lv     *golibvirt.Libvirt
		events <-chan golibvirt.DomainEventLifecycleMsg
		err    error
	}
	res := make(chan result, 1)
	go func() {
		// A fresh client per attempt: go-libvirt's Libvirt is documented
		// as reusable, but its reconnect path mutates state read by its
		// own goroutines; a new object avoids that.
		lv := golibvirt.NewWithDialer(dialers.NewLocal(
			dialers.WithSocket(c.ep.socket),
			dialers.WithLocalTimeout(c.cfg.DialTimeout),
		))
		if err := lv.ConnectToURI(golibvirt.ConnectURI(c.ep.uri)); err != nil {
			res <- result{err: err}
			return
		}
		// The subscription lives as long as the connection; it is torn
		// down by the disconnect, never by a caller's context.
		events, err := lv.LifecycleEvents(context.Background())
		if err != nil {
			_ = lv.Disconnect()
			res <- result{err: fmt.Errorf("subscribe to lifecycle events: %w", err)}
			return
		}
		res <- result{lv: lv, events: events}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, nil, fmt.Errorf("connect to libvirt %s via %s: %w: %w", c.ep.uri, c.ep.socket, ErrUnavailable, r.err)
		}
		return r.lv, r.events, nil
	case <-ctx.Done():
		go func() { // do not leak a connection that completes later
			if r := <-res; r.lv != nil {
				_ = r.lv.Disconnect()
			}
		}()
		return nil, nil, fmt.Errorf("connect to libvirt %s: %w: %w", c.ep.uri, ErrUnavailable, ctx.Err())
	}
}

// supervise pumps events of the current connection, and when it drops,
// reconnects with backoff until Close.
func (c *Conn) supervise(lv *golibvirt.Libvirt, events <-chan golibvirt.DomainEventLifecycleMsg) {
	defer c.wg.Done()
	defer c.closeAllWatchers()
	for {
		// Pump until the connection drops or Close is called. The
		// events channel is closed by go-libvirt on disconnect.
		c.pump(lv, events)

		c.setDisconnected()
		select {
		case <-c.done:
			_ = lv.Disconnect()
			// Drain the events channel until go-libvirt closes it.
			for range events {
			}
			c.log.Debug("libvirt connection closed")
			return
		default:
		}
		_ = lv.Disconnect() // release the socket if not already gone
		c.log.Warn("lost connection to libvirtd; reconnecting")

		var ok bool
		lv, events, ok = c.reconnect()
		if !ok {
			return
		}
		c.setConnected(lv)
		c.log.Info("reconnected to libvirtd")
		c.resync()
	}
}

// pump dispatches lifecycle events until the connection drops or Close.
func (c *Conn) pump(lv *golibvirt.Libvirt, events <-chan golibvirt.DomainEventLifecycleMsg) {
	disconnected := lv.Disconnected()
	for {
		select {
		case msg, ok := <-events:
			if !ok {
				// The stream ended: go-libvirt closes it on disconnect,
				// just before closing Disconnected().
				select {
				case <-disconnected:
				case <-c.done:
				}
				return
			}
			c.dispatch(eventFromMsg(msg))
		case <-disconnected:
			// Deliver what was already queued before the drop.
			for msg := range events {
				c.dispatch(eventFromMsg(msg))
			}
			return
		case <-c.done:
			return
		}
	}
}

// reconnect dials with exponential backoff until it succeeds or Close.
func (c *Conn) reconnect() (*golibvirt.Libvirt, <-chan golibvirt.DomainEventLifecycleMsg, bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-c.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := minBackoff
	for attempt := 1; ; attempt++ {
		lv, events, err := c.dial(ctx)
		if err == nil {
			return lv, events, true
		}
		c.log.Debug("reconnect to libvirtd failed", slog.Int("attempt", attempt), slog.Any("err", err))
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return nil, nil, false
		}
		backoff = min(2*backoff, c.cfg.MaxBackoff)
	}
}

func (c *Conn) setConnected(lv *golibvirt.Libvirt) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lv = lv
	c.gen++
	c.lost = make(chan struct{})
	close(c.ready)
}

func (c *Conn) setDisconnected() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lv != nil {
		c.lv = nil
		c.ready = make(chan struct{})
		close(c.lost)
	}
}

// client returns the current connection and its generation, waiting for
// a reconnection up to ctx. Errors wrap ErrUnavailable.
func (c *Conn) client(ctx context.Context) (*golibvirt.Libvirt, uint64, error) {
	for {
		c.mu.Lock()
		lv, gen, ready, closed := c.lv, c.gen, c.ready, c.closed
		c.mu.Unlock()
		if closed {
			return nil, 0, fmt.Errorf("%w: %w", ErrUnavailable, ErrClosed)
		}
		if lv != nil {
			return lv, gen, nil
		}
		select {
		case <-ready:
		case <-c.done:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("waiting for libvirtd at %s: %w: %w", c.ep.uri, ErrUnavailable, ctx.Err())
		}
	}
}

// do runs fn against the current connection under ctx. go-libvirt's calls
// take no context, so fn runs in its own goroutine and is abandoned (its
// result dropped) when ctx ends first. If fn fails because the connection
// dropped and retry is true (fn is idempotent), do waits for the next
// connection and runs fn again; otherwise the error wraps ErrUnavailable.
func (c *Conn) do(ctx context.Context, retry bool, fn func(lv *golibvirt.Libvirt) error) error {
	for {
		lv, gen, err := c.client(ctx)
		if err != nil {
			return err
		}
		errc := make(chan error, 1)
		go func() { errc <- fn(lv) }()
		select {
		case err = <-errc:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
		var lerr golibvirt.Error
		if err == nil || errors.As(err, &lerr) || !isDisconnect(err) {
			return err
		}
		if !retry {
			return fmt.Errorf("%w: connection lost during call: %w", ErrUnavailable, err)
		}
		c.log.Debug("call interrupted by disconnect; retrying after reconnection", slog.Any("err", err))
		c.waitNewer(ctx, gen)
	}
}

// waitNewer returns once the connection generation is past gen, the Conn
// is closed or ctx is done; the caller's next client() reports which.
func (c *Conn) waitNewer(ctx context.Context, gen uint64) {
	for {
		c.mu.Lock()
		cur, lv, ready, lost, closed := c.gen, c.lv, c.ready, c.lost, c.closed
		c.mu.Unlock()
		if closed || ctx.Err() != nil || (cur > gen && lv != nil) {
			return
		}
		wait := ready
		if lv != nil {
			// Still the failed connection: its drop has not been
			// noticed by the supervisor yet.
			wait = lost
		}
		select {
		case <-wait:
		case <-c.done:
		case <-ctx.Done():
		}
	}
}
