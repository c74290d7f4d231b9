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
}

// Stop says why a domain stopped.
type Stop struct {
	// Reason is the hypervisor's word for it, e.g. "crashed", "shutdown",
	// "destroyed", "failed".
	Reason string
}
