package api

import "time"

// Snapshot is the API's view of one snapshot (GET /v1/snapshots/{name}):
// a checkpoint of a running sandbox's memory, devices and disk, from which
// new sandboxes can be restored.
type Snapshot struct {
	// ID is 12 lowercase hex digits.
	ID string `json:"id"`
	// Name is the user's name, unique among the daemon's snapshots; it
	// matches NamePattern and does not look like an ID.
	Name string `json:"name"`
	// Sandbox and SandboxName name the sandbox it was taken of (which may
	// have been removed since: snapshots outlive their sandbox).
	Sandbox     string `json:"sandbox"`
	SandboxName string `json:"sandbox_name,omitempty"`
	// SourceRemoved says that sandbox has been removed since (the snapshot
	// still restores; its name may now belong to another sandbox).
	SourceRemoved bool `json:"source_removed,omitempty"`
	// Image is the image the sandbox ran; a restore needs the same digest.
	Image ImageRef `json:"image"`
	// Accel, Machine, VCPUs and MemoryMiB are the machine shape a restore
	// gets (the QEMU machine type, vCPUs, memory in MiB).
	Accel     string `json:"accel"`
	Machine   string `json:"machine"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	// Limits are the source sandbox's lifetime limits (TTL, idle timeout,
	// exec timeout, max execs) when the snapshot was taken; a restore
	// starts from them and RestoreRequest.Limits override them. Its
	// host-side resources (Sandbox.Resources: disk, CPU quota, I/O,
	// pids, memory limit) and network policy come from the snapshot
	// unchanged: the restored machine must have the saved shape.
	Limits Limits `json:"limits"`
	// CreatedAt is when the save finished.
	CreatedAt time.Time `json:"created_at"`
	// SaveMs is the save's duration in milliseconds (the sandbox kept
	// running).
	SaveMs int64 `json:"save_ms"`
	// VMStateBytes is the size of the saved memory and device state.
	VMStateBytes int64 `json:"vmstate_bytes"`
	// DiskBytes is what the snapshot costs on the host's disk: how much
	// the qcow2 file's allocation grew with the save, in bytes.
	DiskBytes int64 `json:"disk_bytes"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	// Snapshots are ordered oldest first.
	Snapshots []Snapshot `json:"snapshots"`
}

// SaveSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type SaveSnapshotRequest struct {
	// Name is required; it must match NamePattern, not look like an ID and
	// be unused by other snapshots.
	Name string `json:"name"`
}

// RestoreRequest is the body of POST /v1/snapshots/{name}/restore.
type RestoreRequest struct {
	// Name is the new sandbox's optional name (as in a create).
	Name string `json:"name,omitempty"`
	// Labels are the new sandbox's labels (as in a create).
	Labels map[string]string `json:"labels,omitempty"`
	// Limits override the snapshot's lifetime limits (TTL, idle timeout,
	// exec timeout, max execs) where non-zero. Resources and network
	// policy cannot be changed by a restore: they are the snapshot's.
	Limits Limits `json:"limits,omitempty"`
	// Count is how many sandboxes to restore, concurrently, each with its
	// own identity, 1..MaxRestoreCount; 0 means 1. With more than one
	// they are named Name-1 … Name-Count (unnamed without Name), the
	// answer is a SandboxList, and the request is all or nothing: if one
	// fails, those already made are removed and the first error is
	// answered.
	Count int `json:"count,omitempty"`
}

// Error codes of the snapshot routes.
const (
	CodeSnapshotUnusable    = "snapshot_unusable"    // 422: image changed, file gone or corrupt
	CodeInsufficientStorage = "insufficient_storage" // 507: the host's disk is full
	CodeNotImplemented      = "not_implemented"      // 501: the daemon cannot take snapshots
)

// CheckSnapshotRef checks a snapshot reference from a URL ({name}): a
// snapshot name or ID. Errors are 400 invalid_argument.
func CheckSnapshotRef(name string) error {
	if !nameRE.MatchString(name) {
		return Invalidf("snapshot %s is not a snapshot name or ID", QuoteShort(name))
	}
	return nil
}

// Validate checks a save request's snapshot name: it must match
// NamePattern and not look like an ID. Errors are 400 invalid_argument.
func (r *SaveSnapshotRequest) Validate() error {
	if !nameRE.MatchString(r.Name) {
		return Invalidf("snapshot name %s is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", QuoteShort(r.Name))
	}
	if idRE.MatchString(r.Name) {
		return Invalidf("snapshot name %q looks like an ID (12 hex digits): choose a name that does not", r.Name)
	}
	return nil
}

// Validate checks a restore request: the same checks as a create's name,
// labels and limits, and the count (every fork's name must be valid). Errors are 400 invalid_argument.
func (r *RestoreRequest) Validate() error {
	if err := (&CreateSandboxRequest{Image: "/", Name: r.Name, Labels: r.Labels, Limits: r.Limits}).Validate(); err != nil {
		return err
	}
	return r.validateCount()
}
