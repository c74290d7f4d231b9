package api

import (
	"context"
	"time"
)

// What the idle timeout does to a sandbox (Limits.IdleAction).
const (
	IdleActionRemove      = "remove"        // stop and remove it (the default)
	IdleActionStop        = "stop"          // stop it; POST .../start boots it again
	IdleActionPause       = "pause"         // pause it in memory (vCPUs stopped, memory kept)
	IdleActionPauseToDisk = "pause-to-disk" // save it to disk and end its QEMU (host memory freed)
)

// ValidIdleAction reports whether s is an idle action ("" included: the
// default).
func ValidIdleAction(s string) bool {
	switch s {
	case "", IdleActionRemove, IdleActionStop, IdleActionPause, IdleActionPauseToDisk:
		return true
	}
	return false
}

// PauseRequest is the body of POST /v1/sandboxes/{id}/pause (it may be
// empty: a pause in memory).
type PauseRequest struct {
	// ToDisk saves the machine (memory, devices, disk) into the sandbox's
	// overlay and ends its QEMU: host memory is freed, the resume takes
	// seconds. Without it the vCPUs stop and QEMU keeps the memory: the
	// resume takes milliseconds.
	ToDisk bool `json:"to_disk,omitempty"`
	// EndTTL ends the sandbox's TTL with the pause (limits.ttl_seconds
	// becomes 0), so the paused sandbox stays until a new timeout (POST
	// .../timeout) or its removal: E2B's pause, whose timeout runs only
	// while the sandbox runs. Without it the TTL runs on while paused.
	EndTTL bool `json:"end_ttl,omitempty"`
}

// PauseInfo says how a paused sandbox is paused (Sandbox.Paused).
type PauseInfo struct {
	// ToDisk: paused to disk (no QEMU); else in memory.
	ToDisk bool `json:"to_disk"`
	// PausedAt is when it was paused.
	PausedAt time.Time `json:"paused_at"`
	// File is where its saved state is (the sandbox's qcow2 overlay, an
	// internal snapshot named Tag), to disk only.
	File string `json:"file,omitempty"`
	Tag  string `json:"tag,omitempty"`
	// SaveMs is how long the save took, in milliseconds.
	SaveMs int64 `json:"save_ms,omitempty"`
	// VMStateBytes is the size of the saved memory and device state;
	// DiskBytes what the save added to the overlay's allocation on the
	// host, in bytes: the paused sandbox's disk cost.
	VMStateBytes int64 `json:"vmstate_bytes,omitempty"`
	DiskBytes    int64 `json:"disk_bytes,omitempty"`
	// ExpiresAt is PausedAt + Limits.PausedTTLSeconds (to disk, with a
	// paused TTL only): when the sandbox is removed unless resumed.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ResumeQuery is the query parameter that makes an exec, file or process
// call resume a paused sandbox first ("?resume=true"), as E2B's connect
// does; without it such a call on a paused sandbox is 409
// sandbox_not_running.
const ResumeQuery = "resume"

type resumeKey struct{}

// WithResume returns ctx marked to resume a paused sandbox before the
// call it carries (the server sets it for ?resume=true).
func WithResume(ctx context.Context) context.Context {
	return context.WithValue(ctx, resumeKey{}, true)
}

// ResumeFrom reports whether ctx asks to resume a paused sandbox first
// (WithResume).
func ResumeFrom(ctx context.Context) bool {
	v, _ := ctx.Value(resumeKey{}).(bool)
	return v
}
