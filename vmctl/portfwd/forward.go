// Package portfwd forwards TCP connections: a host listener whose
// accepted connections are each carried to a port of a sandbox's guest
// (Forward), and the relay that copies a connection's bytes both ways
// with TCP's half-close and abort (Relay), which the guest agent uses on
// its side too. The guest end is whatever Options.Dial returns; the daemon
// dials the guest agent (agentproto.OpConnect), so a forward needs no
// guest network device. The package knows nothing of sandboxes.
package portfwd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Sentinels of Listen.
var (
	// ErrAddrInUse: the host address is taken (by another program, or
	// another forward).
	ErrAddrInUse = errdefs.New(errdefs.ErrConflict, "", "host address in use")
	// ErrBadAddr: the host address is malformed or not one of this host's.
	ErrBadAddr = errdefs.New(errdefs.ErrInvalidArgument, "", "bad host address")
)

// DialTimeout bounds the guest side's connect of each accepted
// connection.
const DialTimeout = 30 * time.Second

// Options configures a Forward.
type Options struct {
	// GuestPort is the guest's TCP port, 1–65535 (passed to Dial).
	GuestPort int
	// HostAddr is where to listen: "IP:PORT" with an IP literal; port 0
	// takes a free port. Required.
	HostAddr string
	// Dial connects to the guest's port for one accepted connection;
	// ctx ends with DialTimeout or when the Forward closes. Required.
	Dial func(ctx context.Context, guestPort int) (Conn, error)
	// OnData, if set, is called for every chunk moved either way with its
	// size (activity).
	OnData func(n int)
	// OnEnd, if set, is called when a connection ended (also when its
	// dial failed), after the Forward's counters were updated.
	OnEnd func(ConnResult)
}

// ConnResult is how one forwarded connection went.
type ConnResult struct {
	// Client is the host client's address.
	Client string
	// In and Out are the bytes the client sent to the guest and
	// received from it.
	In, Out int64
	// Err is why the connection failed: the dial (nobody listens on the
	// guest port) or a side's abort; nil for a clean end.
	Err error
	// Duration is the connection's life.
	Duration time.Duration
}

// Stats are a Forward's counters since it was opened.
type Stats struct {
	// Connections is the number of accepted connections; Active those
	// open now; Failed those that failed (dial refused, aborted).
	Connections, Active, Failed int64
	// BytesIn and BytesOut are the bytes carried to the guest and back.
	BytesIn, BytesOut int64
	// LastError is the failure of the last failed connection, "" if none.
	LastError string
}

// Forward is one host listener carrying its connections to one guest
// port. Close ends it.
type Forward struct {
	opts Options
	ln   *net.TCPListener
	ctx  context.Context // ends with Close: cuts dials in flight
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[*net.TCPConn]struct{} // accepted, not yet ended
	stats  Stats
	closed bool
}

// Listen opens the host listener and starts carrying its connections.
// Errors: ErrBadAddr for a malformed address or one this host does not
// have, ErrAddrInUse when the address is taken, errdefs.ErrPermissionDenied
// for a privileged port the daemon may not bind.
func Listen(opts Options) (*Forward, error) {
	if opts.Dial == nil {
		return nil, errors.New("portfwd: no Dial")
	}
	ap, err := netip.ParseAddrPort(opts.HostAddr)
	if err != nil {
		return nil, fmt.Errorf("%w: %q: want IP:PORT, e.g. 127.0.0.1:8080 or [::1]:8080", ErrBadAddr, opts.HostAddr)
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(ap))
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%w: %s is already in use on this host: choose another port, or leave the port out for a free one", ErrAddrInUse, ap)
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return nil, fmt.Errorf("%w: %s is not an address of this host", ErrBadAddr, ap.Addr())
	case errors.Is(err, syscall.EACCES):
		return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("listen on %s: permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)", ap))
	case err != nil:
		return nil, fmt.Errorf("portfwd: listen on %s: %w", ap, err)
	}
	f := &Forward{opts: opts, ln: ln, conns: map[*net.TCPConn]struct{}{}}
	f.ctx, f.stop = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr returns the address the listener is bound to, e.g.
// "127.0.0.1:41234".
func (f *Forward) Addr() string { return f.ln.Addr().String() }

// GuestPort returns the guest port the connections go to.
func (f *Forward) GuestPort() int { return f.opts.GuestPort }

// Stats returns the forward's counters.
func (f *Forward) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

// Close closes the listener, resets the connections still open (their
// guest ends are aborted too) and waits until every one has ended. It is
// idempotent.
func (f *Forward) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	for c := range f.conns {
		TCP{c}.Abort(nil)
	}
	f.mu.Unlock()
	f.stop()
	err := f.ln.Close()
	f.wg.Wait()
	return err
}

// accept runs until the listener closes.
func (f *Forward) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: back off instead of spinning.
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			TCP{c}.Abort(nil)
			continue
		}
		f.conns[c] = struct{}{}
		f.stats.Connections++
		f.stats.Active++
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

// serve carries one accepted connection to the guest.
func (f *Forward) serve(c *net.TCPConn) {
	defer f.wg.Done()
	start := time.Now()
	res := ConnResult{Client: c.RemoteAddr().String()}
	ctx, cancel := context.WithTimeout(f.ctx, DialTimeout)
	g, err := f.opts.Dial(ctx, f.opts.GuestPort)
	cancel()
	if err != nil {
		// The client learns it at once: a reset, not a hang.
		TCP{c}.Abort(err)
		res.Err = err
	} else {
		r := Relay(TCP{c}, g, f.opts.OnData)
		res.In, res.Out, res.Err = r.AToB, r.BToA, r.Err
	}
	res.Duration = time.Since(start)
	f.mu.Lock()
	delete(f.conns, c)
	f.stats.Active--
	f.stats.BytesIn += res.In
	f.stats.BytesOut += res.Out
	if res.Err != nil {
		f.stats.Failed++
		f.stats.LastError = res.Err.Error()
	}
	f.mu.Unlock()
	if f.opts.OnEnd != nil {
		f.opts.OnEnd(res)
	}
}
