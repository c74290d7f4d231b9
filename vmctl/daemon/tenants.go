package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// tenancy is the daemon's side of tenants (docs/tenants.md): which tenant
// owns each sandbox (for events and audit entries, also a little after
// its removal), and the quota each sandbox holds until it is removed.
// seen, removed and owner do nothing on a nil tenancy (a Daemon built
// without New, in tests).
// The caller's tenant is in the request's context (tenant.From); a
// context without one is the admin, who sees everything and has no quota.
type tenancy struct {
	quotas   tenant.QuotaStore
	registry *tenant.Registry

	mu     sync.Mutex
	holds  map[string]func()      // sandbox ID → release of its quota
	owners map[string]string      // sandbox ID → tenant ("" entries are not kept)
	snaps  map[string]*sync.Mutex // tenant → held while one of its snapshots is saved (snapshotLock)
}

// snapshotLock returns the lock tenant name's snapshot saves hold, so
// that its quota check and save are one step (snapshots.go).
func (tn *tenancy) snapshotLock(name string) *sync.Mutex {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if tn.snaps == nil {
		tn.snaps = map[string]*sync.Mutex{}
	}
	if tn.snaps[name] == nil {
		tn.snaps[name] = &sync.Mutex{}
	}
	return tn.snaps[name]
}

// ownerGrace is how long a removed sandbox's tenant is remembered, for
// the audit entries and events that follow its removal.
const ownerGrace = time.Minute

// newTenancy sets tenancy up from cfg: Config.Quotas, or a
// tenant.LocalStore (load fills it).
func newTenancy(cfg Config) *tenancy {
	tn := &tenancy{quotas: cfg.Quotas, registry: cfg.Tenants, holds: map[string]func(){}, owners: map[string]string{}}
	if tn.quotas == nil {
		tn.quotas = tenant.NewLocalStore()
	}
	return tn
}

// load takes the sandboxes known at start (after reconciliation): their
// tenants and, with a store that holds (tenant.LocalStore, the cluster's
// QuotaStore: Hold), what they hold of their tenants' quotas (held even
// where a quota was lowered since).
func (tn *tenancy) load(known []*sandbox.Sandbox) {
	local, _ := tn.quotas.(interface {
		Hold(name string, u tenant.Usage) func()
	})
	tn.mu.Lock()
	defer tn.mu.Unlock()
	for _, sb := range known {
		r := sb.Record()
		if r.Tenant == "" {
			continue
		}
		tn.owners[r.ID] = r.Tenant
		if local != nil {
			tn.holds[r.ID] = local.Hold(r.Tenant, usageOf(r))
		}
	}
}

// usageOf is what sandbox r holds of its tenant's quota.
func usageOf(r sandbox.Record) tenant.Usage {
	return tenant.Usage{Sandboxes: 1, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB}
}

// reserve reserves one sandbox of vcpus and memoryMiB for the tenant
// that will own it (nil: the admin, nothing reserved). Errors:
// tenant.ErrQuotaExceeded (429 tenant_quota, with the numbers).
func (tn *tenancy) reserve(ctx context.Context, t *tenant.Tenant, vcpus, memoryMiB int) (func(), error) {
	return tn.quotas.Reserve(ctx, t, tenant.Usage{Sandboxes: 1, VCPUs: vcpus, MemoryMiB: memoryMiB})
}

// keep hands sandbox id's reservation over to the sandbox: it is given
// back when the sandbox is removed (removed).
func (tn *tenancy) keep(id, owner string, release func()) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	if owner != "" {
		tn.owners[id] = owner
	}
	tn.holds[id] = release
}

// seen records the tenant of a sandbox the manager reports (onChange).
func (tn *tenancy) seen(r sandbox.Record) {
	if tn == nil || r.Tenant == "" {
		return
	}
	tn.mu.Lock()
	defer tn.mu.Unlock()
	tn.owners[r.ID] = r.Tenant
}

// removed gives sandbox id's quota back and forgets its tenant after
// ownerGrace.
func (tn *tenancy) removed(id string) {
	if tn == nil {
		return
	}
	tn.mu.Lock()
	release := tn.holds[id]
	delete(tn.holds, id)
	tn.mu.Unlock()
	if release != nil {
		release()
	}
	if tn.owner(id) == "" {
		return
	}
	time.AfterFunc(ownerGrace, func() {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		delete(tn.owners, id)
	})
}

// owner returns the tenant of sandbox id ("" for the admin's or an
// unknown one).
func (tn *tenancy) owner(id string) string {
	if tn == nil {
		return ""
	}
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return tn.owners[id]
}

// named returns the tenant called name: the registry's, else one without
// quota (a tenant removed from the file since its sandboxes were made);
// nil for "".
func (tn *tenancy) named(name string) *tenant.Tenant {
	if name == "" {
		return nil
	}
	if t, ok := tn.registry.Get(name); ok {
		return t
	}
	return &tenant.Tenant{Name: name}
}

// get resolves ref (ID or name) to a sandbox the caller of ctx may see:
// another tenant's sandbox is answered exactly like a missing one.
func (c *core) get(ctx context.Context, ref string) (*sandbox.Sandbox, error) {
	sb, err := c.mgr.Get(ref)
	if err != nil {
		return nil, err
	}
	if !tenant.Sees(ctx, sb.Tenant()) {
		return nil, noSandbox(ref)
	}
	return sb, nil
}

// noSandbox is sandbox.Manager.Get's error for a ref it does not know.
func noSandbox(ref string) error {
	return fmt.Errorf("%w: no sandbox %q: `agentbox ls` lists them", sandbox.ErrNotFound, ref)
}

// snapshot resolves a snapshot (name or ID) the caller of ctx may see:
// another tenant's is answered exactly like a missing one.
func (c *core) snapshot(ctx context.Context, ref string) (sandbox.SnapshotRecord, error) {
	rec, err := c.snaps.Get(ref)
	if err != nil {
		return rec, err
	}
	if !tenant.Sees(ctx, rec.Tenant) {
		return sandbox.SnapshotRecord{}, fmt.Errorf("%w: no snapshot %q: `agentbox snapshot ls` lists them", sandbox.ErrNoSnapshot, ref)
	}
	return rec, nil
}

// adminOnly refuses a tenant what only the admin may do (what.. is the
// action, e.g. "removing a warm template").
func adminOnly(ctx context.Context, what string) error {
	if t, ok := tenant.From(ctx); ok {
		return errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("%s is the admin's: tenant %s may not; warm templates and templates are shared read-only", what, t.Name))
	}
	return nil
}

// auditTenant is the tenant an audit entry of sandbox id by the caller of
// ctx concerns: the sandbox's, else the caller's.
func (c *core) auditTenant(ctx context.Context, id string) string {
	if id != "" {
		if o := c.tenants.owner(id); o != "" {
			return o
		}
	}
	return tenant.Name(ctx)
}

// eventSeen reports whether the caller of ctx may see ev.
func eventSeen(ctx context.Context, ev api.Event) bool { return tenant.Sees(ctx, ev.Tenant) }
