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

// Snapshotter is the part of a driver that checkpoints live domains into
// internal snapshots of their qcow2 overlay (QEMU's job-based
// snapshot-save / snapshot-load / snapshot-delete QMP commands, see
// https://qemu-project.gitlab.io/qemu/interop/qemu-qmp-ref.html) and starts
// domains paused for a restore. vmctl/libvirt.Driver implements it.
type Snapshotter interface {
	// StartDomainPaused is StartDomain with the vCPUs stopped
	// (virDomainCreateXML with VIR_DOMAIN_START_PAUSED), so a snapshot can
	// be loaded before the guest runs. On error no domain is left behind.
	StartDomainPaused(ctx context.Context, spec domain.Spec) error
	// PauseDomain stops the domain's vCPUs (QMP stop: block I/O drained and
	// flushed); ResumeDomain lets them run again (QMP cont).
	PauseDomain(ctx context.Context, name string) error
	ResumeDomain(ctx context.Context, name string) error
	// SaveSnapshot saves the running domain's memory, device state and
	// disk under tag inside its overlay; the domain keeps (or goes back to)
	// running. A failed save removes whatever part of the snapshot was
	// written. A tag that already exists fails with ErrSnapshotExists.
	SaveSnapshot(ctx context.Context, name, tag string) error
	// LoadSnapshot loads tag into a paused domain (see StartDomainPaused)
	// and leaves it paused. A missing tag fails with ErrNoSnapshot; any
	// other failure leaves the domain paused for the caller to destroy.
	LoadSnapshot(ctx context.Context, name, tag string) error
	// DeleteSnapshot removes tag from the running domain's overlay. A
	// missing tag fails with ErrNoSnapshot (QEMU itself reports success).
	DeleteSnapshot(ctx context.Context, name, tag string) error
}
