// Package tenant is who a request acts for when the daemon serves several
// tenants (`agentbox serve --tenants FILE`, docs/tenants.md): the Tenant
// and its Quota, the identity carried in a request's context (With,
// From), the Registry that maps a presented bearer token to its tenant
// (tokens are kept only as SHA-256 digests, compared in constant time),
// the tenants file (Load, Parse), and quota accounting behind the
// QuotaStore seam (quota.go): LocalStore on one host, a cluster store
// over a shared key-value store elsewhere.
//
// A request without a tenant is the admin's: the unix socket, and a TCP
// client with the daemon's own --token-file token. The admin sees and
// touches every sandbox and has no quota.
package tenant

import (
	"context"
	"fmt"
	"slices"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Tenant is one tenant of the daemon. Its values never change once
// loaded; share the pointer.
type Tenant struct {
	// Name is the tenant's unique name (NamePattern), shown as a
	// sandbox's tenant and in the audit log.
	Name string
	// Quota is what the tenant's sandboxes may hold together.
	Quota Quota
	// Grants is what the operator lets the tenant reach and share beyond
	// its own sandboxes (the tenants file's host_ports, share_templates).
	Grants Grants
}

// DefaultMaxPortForwards is the most port forwards one sandbox of a
// tenant may have at once when its max_port_forwards is absent.
const DefaultMaxPortForwards = 16

// Grants is what the operator allows a tenant that a tenant cannot give
// itself. The zero value grants nothing.
type Grants struct {
	// HostPorts are the ports of the host's loopback (127.0.0.1:PORT) a
	// network policy of the tenant's sandboxes may expose with host:PORT
	// rules (docs/network.md); none without a grant. Sorted, unique,
	// 1–65535.
	HostPorts []int
	// ShareTemplates makes the tenant's warm sandboxes clone the memory
	// templates every sharing caller (the admin, other sharing tenants)
	// clones; false (the default) gives the tenant templates of its own,
	// since clones of one template share host pages (cross-VM side
	// channels cannot be ruled out: Kata Containers' VM templating notes
	// the same).
	ShareTemplates bool
}

// Quota is a tenant's limits. Zero in MaxSandboxes, MaxVCPUs or
// MaxMemoryMiB means no limit of that kind.
type Quota struct {
	// MaxSandboxes is the most sandboxes the tenant may have at once, in
	// any state (a stopped or failed sandbox counts until it is removed).
	MaxSandboxes int
	// MaxVCPUs is the most vCPUs its sandboxes may have together.
	MaxVCPUs int
	// MaxMemoryMiB is the most guest memory, in MiB, its sandboxes may
	// have together.
	MaxMemoryMiB int
	// MaxPriority is the highest priority class (api.Priority*) its
	// creates may ask for; "" is api.PriorityNormal.
	MaxPriority string
	// MaxSnapshots is the most snapshots the tenant may keep at once; 0:
	// no limit.
	MaxSnapshots int
	// MaxSnapshotMiB is the most MiB its snapshots may take on the
	// host's disk together (saved memory state and disk, as `snapshot
	// ls` shows them); 0: no limit.
	MaxSnapshotMiB int64
	// MaxPortForwards is the most port forwards one of its sandboxes may
	// have at once; 0 is DefaultMaxPortForwards (PortForwards).
	MaxPortForwards int
}

// PortForwards returns q.MaxPortForwards, or DefaultMaxPortForwards when
// it is 0.
func (q Quota) PortForwards() int {
	if q.MaxPortForwards > 0 {
		return q.MaxPortForwards
	}
	return DefaultMaxPortForwards
}

// AllowsHostPort reports whether t may expose the host's loopback port
// port to its sandboxes (a host:PORT rule); the admin (a nil t) may
// expose any.
func (t *Tenant) AllowsHostPort(port int) bool {
	if t == nil {
		return true
	}
	return slices.Contains(t.Grants.HostPorts, port)
}

// SharesTemplates reports whether t's warm sandboxes clone the shared
// memory templates: true for the admin (a nil t) and a tenant granted
// share_templates.
func (t *Tenant) SharesTemplates() bool { return t == nil || t.Grants.ShareTemplates }

// CheckPriority returns a permission-denied error (403) when a create of
// t asks a priority class above t's max_priority; p is already valid
// (api.PriorityRank). A nil t (the admin) may ask any.
func (t *Tenant) CheckPriority(p string) error {
	if t == nil {
		return nil
	}
	asked, _ := api.PriorityRank(p)
	ceiling, _ := api.PriorityRank(t.Quota.MaxPriority)
	if asked <= ceiling {
		return nil
	}
	if p == "" {
		p = api.PriorityNormal
	}
	maxP := t.Quota.MaxPriority
	if maxP == "" {
		maxP = api.PriorityNormal
	}
	return ErrPriority.WithMessage(fmt.Sprintf("tenant %s may create at priority %s at most, asked %s: ask for %s or lower, or raise its max_priority", t.Name, maxP, p, maxP))
}

type ctxKey struct{}

// With returns ctx carrying t as the tenant the request acts for; a nil t
// is the admin (From reports no tenant). Only the daemon's own
// authentication (the API's TCP auth, the E2B front's API key) puts a
// tenant into a context: nothing a client sends names one.
func With(ctx context.Context, t *Tenant) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// From returns the tenant ctx carries (With) and true, or nil and false
// for the admin (no tenant).
func From(ctx context.Context) (*Tenant, bool) {
	t, _ := ctx.Value(ctxKey{}).(*Tenant)
	return t, t != nil
}

// Name returns the name of ctx's tenant, "" for the admin.
func Name(ctx context.Context) string {
	if t, ok := From(ctx); ok {
		return t.Name
	}
	return ""
}

// Sees reports whether the caller of ctx may see and touch an object
// (sandbox, snapshot) owned by tenant owner ("" the admin's): the admin
// sees everything, a tenant only its own.
func Sees(ctx context.Context, owner string) bool {
	t, ok := From(ctx)
	return !ok || t.Name == owner
}

// CheckHostPorts returns nil when t may expose every one of ports (the
// host:PORT rules of a network policy, from netpolicy.Policy.HostPorts),
// else an error wrapping ErrNotGranted naming the first port it may not
// and the ports it may. A nil t (the admin) may expose any.
func (t *Tenant) CheckHostPorts(ports []uint16) error {
	if t == nil {
		return nil
	}
	for _, p := range ports {
		if t.AllowsHostPort(int(p)) {
			continue
		}
		granted := "none"
		if len(t.Grants.HostPorts) > 0 {
			granted = fmt.Sprint(t.Grants.HostPorts)
		}
		return errdefs.WithDetails(ErrNotGranted.WithMessage(fmt.Sprintf(
			"tenant %s may not expose the host's port %d (--allow host:%d): tenants reach only the host ports the operator grants in the tenants file's host_ports (granted: %s); ask the operator for host ports",
			t.Name, p, p, granted)), map[string]any{"tenant": t.Name, "host_port": int(p), "host_ports": t.Grants.HostPorts})
	}
	return nil
}
