package sandbox

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// Driver starts and stops the virtual machines behind sandboxes. The libvirt
// driver (vmctl/libvirt.Driver) implements it; a second hypervisor driver
// would implement the same three methods.
type Driver interface {
	// StartDomain defines and starts a transient domain from spec. On error
	// no domain is left behind.
	StartDomain(ctx context.Context, spec domain.Spec) error
	// DestroyDomain stops the domain at once (power cut). A domain that is
	// already gone is not an error.
	DestroyDomain(ctx context.Context, name string) error
	// WatchStop returns a channel that receives one Stop when the domain
	// stops for any reason (guest poweroff, crash, panic, destroy). It must be
	// called before StartDomain so an early crash is not missed. The channel
	// is closed when ctx is done.
	WatchStop(ctx context.Context, name string) (<-chan Stop, error)
	// ListDomains returns every domain the hypervisor knows whose metadata
	// names an agentbox sandbox (libvirt: virConnectListAllDomains plus
	// agentbox's <metadata> element). Reconcile uses it.
	ListDomains(ctx context.Context) ([]DomainStatus, error)
}

// DomainStatus is what the hypervisor says about one agentbox domain.
type DomainStatus struct {
	// Name is the domain name.
	Name string
	// SandboxID and Owner come from the domain's metadata (see
	// domain.Metadata).
	SandboxID string
	Owner     string
	// Running is true while the domain's vCPUs may run (running, paused,
	// blocked); false once it is shut off or crashed.
	Running bool
}

// Stop says why a domain stopped.
type Stop struct {
	// Reason is the hypervisor's word for it, e.g. "crashed", "shutdown",
	// "destroyed", "failed".
	Reason string
}
