package sandbox

import (
	"encoding/json"
	"time"

	"github.com/agentbox/agentbox/vmctl/domain"
)

// SnapshotRecord is the durable description of one snapshot: an internal
// snapshot (memory, device state and disk) inside a qcow2 file, plus what
// a restore needs to start a domain of the same shape. Times are UTC.
type SnapshotRecord struct {
	// ID is 12 lowercase hex digits.
	ID string `json:"id"`
	// Name is the user's unique name (the caller checks its syntax; the
	// daemon uses the sandbox name pattern).
	Name string `json:"name"`
	// Tag is the snapshot's tag inside File (QEMU's snapshot-save tag):
	// "s" + ID (the user's name never reaches QEMU).
	Tag string `json:"tag"`
	// SandboxID and SandboxName name the sandbox it was taken of; the
	// sandbox may since have been removed.
	SandboxID   string `json:"sandbox_id"`
	SandboxName string `json:"sandbox_name,omitempty"`
	// Tenant is the tenant of the sandbox it was taken of, which owns it
	// ("" for the admin's).
	Tenant string `json:"tenant,omitempty"`
	// File is the qcow2 file that holds the snapshot: the source
	// sandbox's overlay while it exists, then
	// STATE_DIR/snapshots/<sandbox ID>.qcow2 (see Manager.Remove).
	File string `json:"file"`
	// ImageName, ImageDigest (hex sha256 of the manifest) and ImageDir
	// identify the image; a restore refuses an image whose digest changed.
	ImageName   string `json:"image_name"`
	ImageDigest string `json:"image_digest"`
	ImageDir    string `json:"image_dir"`
	// Accel, DomainType and Machine are the source's accelerator, libvirt
	// domain type and QEMU machine type.
	Accel      string `json:"accel"`
	DomainType string `json:"domain_type"`
	Machine    string `json:"machine"`
	// VCPUs and MemoryMiB are the source's resources (MiB).
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	// Spec is the source's domain description; a restore reuses it with
	// the new sandbox's name, paths and identity, so the device set is the
	// same one the memory state expects.
	Spec domain.Spec `json:"spec"`
	// Source is the source sandbox's Record as JSON when the snapshot was
	// taken; a restore starts the new record from it, so resources and
	// network policy carry over.
	Source json.RawMessage `json:"source,omitempty"`
	// Extra is the source's Record.Extra when the snapshot was taken
	// (opaque to the manager; the daemon's limits and policies).
	Extra []byte `json:"extra,omitempty"`
	// CreatedAt is when the save finished.
	CreatedAt time.Time `json:"created_at"`
	// SaveMs is the save's duration in milliseconds.
	SaveMs int64 `json:"save_ms"`
	// VMStateBytes is the size of the saved memory and device state
	// (qemu-img snapshot -l's VM SIZE), in bytes.
	VMStateBytes int64 `json:"vmstate_bytes"`
	// DiskBytes is how much the file's allocation grew with the save, in
	// bytes: what the snapshot costs on the host's disk (vmstate plus the
	// clusters the snapshot pins).
	DiskBytes int64 `json:"disk_bytes"`
}

// SnapshotStore keeps SnapshotRecords durably. vmctl/store implements it
// next to Store; the Manager finds it by type-asserting Config.Store and
// keeps records in memory only without it. Methods are called from many
// goroutines.
type SnapshotStore interface {
	// PutSnapshot inserts or replaces the record with s.ID.
	PutSnapshot(s SnapshotRecord) error
	// DeleteSnapshot removes the record with id; a missing one is not an
	// error.
	DeleteSnapshot(id string) error
	// Snapshots returns every record, in no particular order.
	Snapshots() ([]SnapshotRecord, error)
}
