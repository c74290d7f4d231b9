package libvirt

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// Driver adapts a Conn to the sandbox manager's sandbox.Driver interface:
// domains are built from a domain.Spec and started as transient domains.
type Driver struct {
	conn *Conn
	// autoDestroy starts every domain with CreateOptions.AutoDestroy.
	autoDestroy bool
	// snapLocks serialises snapshot operations per domain (snapshot.go).
	snapLocks domainLocks
}

// NewDriver returns a sandbox driver on the shared connection conn.
func NewDriver(conn *Conn, opts ...DriverOption) *Driver {
	d := &Driver{conn: conn}
	for _, o := range opts {
		o(d)
	}
	return d
}

// DriverOption configures a Driver.
type DriverOption func(*Driver)

// WithAutoDestroy makes every domain the driver starts (StartDomain and
// StartDomainPaused) die with conn: libvirt's VIR_DOMAIN_START_AUTODESTROY
// (see CreateOptions.AutoDestroy). An in-process `agentbox run` sets it so
// that a kill -9 leaves no domain running; `agentbox serve` never does,
// since its domains must survive a daemon restart.
func WithAutoDestroy() DriverOption { return func(d *Driver) { d.autoDestroy = true } }

var _ sandbox.Driver = (*Driver)(nil)

// StartDomain renders spec to domain XML and starts it as a transient domain
// (virDomainCreateXML). If the call fails after libvirt may have created the
// domain (e.g. ctx ended mid-call), the domain is destroyed by name so that
// nothing is left behind.
func (d *Driver) StartDomain(ctx context.Context, spec domain.Spec) error {
	return d.startDomain(ctx, spec, CreateOptions{})
}

func (d *Driver) startDomain(ctx context.Context, spec domain.Spec, opts CreateOptions) error {
	opts.AutoDestroy = opts.AutoDestroy || d.autoDestroy
	xml, err := domain.XML(spec)
	if err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	}
	if _, err := d.conn.CreateDomain(ctx, xml, opts); err != nil {
		if !errors.Is(err, ErrExists) {
			if derr := d.conn.DestroyDomain(context.WithoutCancel(ctx), spec.Name); derr != nil {
				err = errors.Join(err, fmt.Errorf("cleanup of %s: %w", spec.Name, derr))
			}
		}
		return err
	}
	return nil
}

// DestroyDomain stops the domain at once; a domain already gone is not an
// error.
func (d *Driver) DestroyDomain(ctx context.Context, name string) error {
	return d.conn.DestroyDomain(ctx, name)
}

// WatchStop delivers one sandbox.Stop when the domain's lifecycle reaches
// "stopped" (libvirt VIR_DOMAIN_EVENT_STOPPED; its detail becomes the
// reason: "shutdown", "destroyed", "crashed", "failed", or "vanished" when
// the stop happened while libvirtd was unreachable). A "crashed" event (guest
// panic reported by pvpanic) is delivered at once as well.
func (d *Driver) WatchStop(ctx context.Context, name string) (<-chan sandbox.Stop, error) {
	events, err := d.conn.WatchLifecycle(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan sandbox.Stop, 1)
	go func() {
		defer close(out)
		for ev := range events {
			switch ev.Kind {
			case EventStopped, EventCrashed:
				reason := string(ev.Kind) + "/" + ev.Detail
				select {
				case out <- sandbox.Stop{Reason: reason}:
				case <-ctx.Done():
				}
				// Drain until the watch ends so the fan-out never blocks.
				for range events {
				}
				return
			}
		}
	}()
	return out, nil
}

// ListDomains lists the domains that carry agentbox metadata (a sandbox
// id), with their owner and whether they still run.
func (d *Driver) ListDomains(ctx context.Context) ([]sandbox.DomainStatus, error) {
	doms, err := d.conn.ListDomains(ctx)
	if err != nil {
		return nil, err
	}
	var out []sandbox.DomainStatus
	for _, dom := range doms {
		if dom.SandboxID == "" {
			continue
		}
		out = append(out, sandbox.DomainStatus{
			Name:      dom.Name,
			SandboxID: dom.SandboxID,
			Owner:     dom.Owner,
			Running:   dom.State.Active(),
		})
	}
	return out, nil
}
