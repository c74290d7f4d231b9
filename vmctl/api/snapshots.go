package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

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
}

// SnapshotBackend is the part of a Backend that handles snapshots; a
// Backend without it answers the snapshot routes 501 not_implemented.
// Snapshot references (name) are a snapshot name or ID, syntax-checked.
type SnapshotBackend interface {
	// SaveSnapshot checkpoints the running sandbox ref live. Errors: 404
	// not_found, 409 sandbox_not_running, 409 name_taken, 507
	// insufficient_storage (the sandbox keeps running).
	SaveSnapshot(ctx context.Context, ref string, req SaveSnapshotRequest) (Snapshot, error)
	// ListSnapshots lists snapshots oldest first; with sandbox != "" those
	// of that sandbox (ID or name; a removed sandbox by ID).
	ListSnapshots(ctx context.Context, sandbox string) ([]Snapshot, error)
	// GetSnapshot returns one snapshot. Errors: 404 not_found.
	GetSnapshot(ctx context.Context, name string) (Snapshot, error)
	// DeleteSnapshot removes a snapshot. Errors: 404 not_found.
	DeleteSnapshot(ctx context.Context, name string) error
	// RestoreSnapshot starts a new sandbox from the snapshot. Errors: 404,
	// 409 name_taken, 422 snapshot_unusable (image changed, file gone or
	// corrupt), 429 capacity_exceeded, 507 insufficient_storage.
	RestoreSnapshot(ctx context.Context, name string, req RestoreRequest) (Sandbox, error)
}

// Error codes of the snapshot routes.
const (
	CodeSnapshotUnusable    = "snapshot_unusable"    // 422: image changed, file gone or corrupt
	CodeInsufficientStorage = "insufficient_storage" // 507: the host's disk is full
	CodeNotImplemented      = "not_implemented"      // 501: the daemon cannot take snapshots
)

func (s *Server) snapshots() (SnapshotBackend, error) {
	if sb, ok := s.backend.(SnapshotBackend); ok {
		return sb, nil
	}
	return nil, Errorf(http.StatusNotImplemented, CodeNotImplemented, "this daemon does not support snapshots")
}

// snapshotName returns the checked {name} of r.
func snapshotName(r *http.Request) (string, error) {
	name := r.PathValue("name")
	if !nameRE.MatchString(name) {
		return "", invalid("snapshot %s is not a snapshot name or ID", quoteShort(name))
	}
	return name, nil
}

func checkSnapshotName(name string) error {
	if !nameRE.MatchString(name) {
		return invalid("snapshot name %s is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", quoteShort(name))
	}
	if idRE.MatchString(name) {
		return invalid("snapshot name %q looks like an ID (12 hex digits): choose a name that does not", name)
	}
	return nil
}

func (s *Server) saveSnapshot(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.snapshots()
	if err != nil {
		return err
	}
	id, err := ref(r)
	if err != nil {
		return err
	}
	var req SaveSnapshotRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := checkSnapshotName(req.Name); err != nil {
		return err
	}
	snap, err := be.SaveSnapshot(r.Context(), id, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/snapshots/"+snap.Name)
	return writeJSON(w, http.StatusCreated, snap)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, q url.Values) error {
	be, err := s.snapshots()
	if err != nil {
		return err
	}
	sb := q.Get("sandbox")
	if sb != "" {
		if err := checkRef(sb); err != nil {
			return err
		}
	}
	list, err := be.ListSnapshots(r.Context(), sb)
	if err != nil {
		return err
	}
	if list == nil {
		list = []Snapshot{}
	}
	return writeJSON(w, http.StatusOK, SnapshotList{Snapshots: list})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.snapshots()
	if err != nil {
		return err
	}
	name, err := snapshotName(r)
	if err != nil {
		return err
	}
	snap, err := be.GetSnapshot(r.Context(), name)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, snap)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.snapshots()
	if err != nil {
		return err
	}
	name, err := snapshotName(r)
	if err != nil {
		return err
	}
	if err := be.DeleteSnapshot(r.Context(), name); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.snapshots()
	if err != nil {
		return err
	}
	name, err := snapshotName(r)
	if err != nil {
		return err
	}
	var req RestoreRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	// The same checks as a create's name, labels and limits.
	if err := validateCreate(&CreateSandboxRequest{Image: "/", Name: req.Name, Labels: req.Labels, Limits: req.Limits}); err != nil {
		return err
	}
	sb, err := be.RestoreSnapshot(r.Context(), name, req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sandboxes/"+sb.ID)
	return writeJSON(w, http.StatusCreated, sb)
}
