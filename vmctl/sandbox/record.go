package sandbox

import (
	"time"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// State is a sandbox's place in its lifecycle:
//
//	creating ──→ running ──→ stopping ──→ stopped
//	   ↑         pause ↓ ↑ resume            │
//	   │            paused ──(stop)──────────┤
//	   └───────────── start ─────────────────┘ (from failed too)
//
//	every state but stopped may end in failed (Reason says why)
//
// A paused sandbox's vCPUs are stopped with its memory in QEMU (pause), or
// its machine is saved into its overlay and QEMU is gone (pause to disk;
// Record.Paused says where); resume continues it in place with the same
// ID, name, tap and address. stopped and failed are final for the
// domain: it is gone, and the record, overlay, console log and audit
// trail stay until the sandbox is removed or started again (Manager.Start
// cold-boots it on its overlay).
type State string

// The states of the lifecycle.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateStopping State = "stopping"
	StatePaused   State = "paused"
	StateStopped  State = "stopped"
	StateFailed   State = "failed"
)

// Final reports whether no domain runs in this state any more and none
// will without Manager.Start (a sandbox paused to disk has no domain
// either, but is not final: Record.PausedToDisk).
func (s State) Final() bool { return s == StateStopped || s == StateFailed }

// Record is the durable description of a sandbox: what the manager writes
// to its Store at every state change and reads back on start to reconcile
// with what libvirt says runs. Times are UTC.
type Record struct {
	// ID is 12 lowercase hex digits.
	ID string `json:"id"`
	// Name is the user's unique name, or "".
	Name string `json:"name,omitempty"`
	// State and Reason: see State.
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Domain is the libvirt domain name (DomainPrefix + ID).
	Domain string `json:"domain"`
	// ImageName, ImageDigest and ImageDir identify the booted image.
	ImageName   string `json:"image_name"`
	ImageDigest string `json:"image_digest"`
	ImageDir    string `json:"image_dir"`
	// Template is the name of the daemon's template the sandbox was
	// created from (serve --template), or "".
	Template string `json:"template,omitempty"`
	// Tenant is the tenant that owns the sandbox (vmctl/tenant; serve
	// --tenants), "" for the admin's.
	Tenant string `json:"tenant,omitempty"`
	// Accel is "kvm" or "tcg"; DomainType the libvirt domain type.
	Accel      string `json:"accel"`
	DomainType string `json:"domain_type"`
	// VCPUs and MemoryMiB are the resources the domain got (MiB).
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	// Labels are the user's key/value labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Dir, Overlay, ConsoleLog and AgentSocket are the sandbox's paths on
	// the host.
	Dir         string `json:"dir"`
	Overlay     string `json:"overlay"`
	ConsoleLog  string `json:"console_log"`
	AgentSocket string `json:"agent_socket"`
	// CreatedAt, StartedAt and StoppedAt are the lifecycle's times; zero
	// when not reached.
	CreatedAt time.Time `json:"created_at"`
	StartedAt time.Time `json:"started_at,omitzero"`
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// BootMs is the time from domain start to the agent's handshake.
	BootMs int64 `json:"boot_ms,omitempty"`
	// Resources are the host-side limits (disk, CPU quota, memory hard
	// limit, I/O, pids) and how each is enforced; nil in records written
	// before they existed.
	Resources *ResourceLimits `json:"resources,omitempty"`
	// Spec is the domain description the sandbox was started with (nil
	// for records written before snapshots existed); a snapshot of the
	// sandbox keeps it so a restore has the same devices.
	Spec *domain.Spec `json:"spec,omitempty"`
	// Network is the sandbox's network policy and attachment (network.go);
	// nil in records older than network support (mode none).
	Network *NetworkRecord `json:"network,omitempty"`
	// Paused describes how a paused sandbox is paused and, paused to
	// disk, where its saved machine is (pause.go); nil unless paused
	// (kept after a failed resume from disk, for the reason's sake).
	Paused *PauseRecord `json:"paused,omitempty"`
	// Extra is the sandbox's exec accounting as JSON (ExecAccount: limits
	// and counters; account.go); the manager itself never reads it.
	Extra []byte `json:"extra,omitempty"`
	// SharedMemory is the guest RAM the sandbox maps from a memory
	// template rather than holds (a clone; sharedmem.go); nil otherwise,
	// and nil again once its domain came back with private RAM (a start
	// after a stop, a resume from disk; a restore of its snapshot never
	// had it).
	SharedMemory *SharedMemory `json:"shared_memory,omitempty"`
	// Ports are the sandbox's port forwards (ports.go), re-opened at the
	// same host addresses by a restarted daemon; never shared with the
	// slice a caller passed (SetPorts copies).
	Ports []PortForward `json:"ports,omitempty"`
	// QEMUUser is the uid and gid of the range Config.QEMUUsers the
	// sandbox's QEMU runs as (qemuuser.go; a memory template's clone runs
	// with the clone group instead of this gid); nil when QEMU runs as
	// qemu.conf's user.
	QEMUUser *domain.QEMUUser `json:"qemu_user,omitempty"`
	// OverlayFile is the identity of the overlay the daemon gave QEMU's
	// user (qemuuser.go confine, at the first domain start with a QEMU
	// user): later starts chown and chmod only that inode
	// (OpenSandboxFile). nil without QEMU users and in older records
	// (set at their next start).
	OverlayFile *FileID `json:"overlay_file,omitempty"`
}

// Store keeps Records durably. vmctl/store implements it on bbolt; a nil
// Store keeps them in memory only (agentbox run). Methods are called from
// many goroutines.
type Store interface {
	// PutSandbox inserts or replaces the record with r.ID.
	PutSandbox(r Record) error
	// DeleteSandbox removes the record; a missing one is not an error.
	DeleteSandbox(id string) error
	// Sandboxes returns every record, in no particular order.
	Sandboxes() ([]Record, error)
}
