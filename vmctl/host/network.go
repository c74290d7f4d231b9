package host

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/egress"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// serveNetwork builds serve's network provider from o. Without the
// privileges it needs (CAP_NET_ADMIN, nf_tables, /dev/net/tun) it logs
// why and returns nil: the daemon then refuses network policies other
// than none with that reason, and everything else works. The proxies
// intercept the hosts sandboxes' secrets are bound to (their files under
// stateDir) and hand those decisions to aud. release gives the table
// back (nil without a provider).
func serveNetwork(o NetworkOptions, log *slog.Logger, stateDir string, aud *egressAudit) (_ sandbox.NetworkProvider, release func()) {
	pool := o.Pool
	if !pool.IsValid() {
		pool = network.DefaultPool
	}
	table := o.Table
	if table == "" {
		table = network.DefaultTable
	}
	m, err := network.New(network.Config{
		Pool:  pool,
		Table: table,
		Egress: network.StartEgress(network.EgressOptions{
			Hosts:  o.Hosts,
			Logger: log,
			OnDecision: func(id string, d egress.Decision) {
				log.Debug("egress decision", "sandbox", id, "kind", d.Kind, "allowed", d.Allowed, "name", d.Name, "port", d.Port, "reason", d.Reason)
				aud.decide(id, d)
			},
			Intercept: daemon.SecretsIntercept(stateDir, o.SecretsRoots),
		}),
		Logger: log,
	})
	if err != nil {
		log.Warn("sandbox networks are unavailable (only --network none works)", "err", err)
		return nil, nil
	}
	return m, func() {
		if _, err := m.Release(context.Background()); err != nil {
			log.Warn("release the sandbox network table", "table", m.Table(), "err", err)
		}
	}
}

// egressAudit hands the egress services' decisions to the daemon's audit
// log (daemon.AuditEgress) once the daemon exists: the network is made
// before it.
type egressAudit struct {
	f atomic.Pointer[func(id string, d egress.Decision)]
}

func (a *egressAudit) set(f func(id string, d egress.Decision)) { a.f.Store(&f) }

func (a *egressAudit) decide(id string, d egress.Decision) {
	if f := a.f.Load(); f != nil {
		(*f)(id, d)
	}
}

// NetworkTable is the nftables table (family inet) of in-process
// sandboxes, apart from any daemon's; every in-process run on a host
// shares it.
const NetworkTable = "agentbox_run"

// NewNetwork is the network provider of an in-process run whose policy
// needs one (the default of LocalOptions.Network): the default pool (subnets in
// use on the host are skipped), NetworkTable, an egress service per
// sandbox. Errors say what is missing (root, nf_tables).
func NewNetwork(log *slog.Logger) (sandbox.NetworkProvider, error) {
	m, err := network.New(network.Config{
		Table:  NetworkTable,
		Egress: network.StartEgress(network.EgressOptions{Logger: log}),
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox network (run as root): %w", err)
	}
	return m, nil
}

// lazyNetwork makes the in-process network provider on first use: only a
// sandbox whose policy needs a network needs root and nf_tables. Its
// Sweep removes nothing: the table is shared by every in-process run on
// the host, and the other runs' sandboxes are not this service's to
// judge.
type lazyNetwork struct {
	make func() (sandbox.NetworkProvider, error)
	mu   sync.Mutex
	p    sandbox.NetworkProvider // nil until made
}

var _ sandbox.NetworkProvider = (*lazyNetwork)(nil)

// get returns the provider, making it if need be; a failure is retried
// by the next call.
func (n *lazyNetwork) get() (sandbox.NetworkProvider, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		p, err := n.make()
		if err != nil {
			return nil, err
		}
		n.p = p
	}
	return n.p, nil
}

// Setup implements sandbox.NetworkProvider.
func (n *lazyNetwork) Setup(ctx context.Context, id string, policy netpolicy.Policy, outBytesPerSec uint64) (network.Attachment, error) {
	p, err := n.get()
	if err != nil {
		return network.Attachment{}, err
	}
	return p.Setup(ctx, id, policy, outBytesPerSec)
}

// Adopt implements sandbox.NetworkProvider.
func (n *lazyNetwork) Adopt(ctx context.Context, id string, att network.Attachment, policy netpolicy.Policy) error {
	p, err := n.get()
	if err != nil {
		return err
	}
	return p.Adopt(ctx, id, att, policy)
}

// Teardown implements sandbox.NetworkProvider; without a provider made
// there is nothing to tear down.
func (n *lazyNetwork) Teardown(ctx context.Context, id string) error {
	n.mu.Lock()
	p := n.p
	n.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Teardown(ctx, id)
}

// Sweep implements sandbox.NetworkProvider: it removes nothing (see
// lazyNetwork).
func (n *lazyNetwork) Sweep(context.Context, func(string) bool) ([]string, error) {
	return nil, nil
}
