package backend

import (
	"context"
	"io"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ProcessTerminalBackend is the part of a Backend that resizes detached
// processes' terminals and attaches clients to running detached
// processes; a Backend without it answers those routes 501
// not_implemented.
type ProcessTerminalBackend interface {
	// ResizeProcess sets the size of the process's terminal (size
	// validated) and returns the process. Errors: 404 not_found, 400
	// invalid_argument for a process without a terminal, 409
	// process_exited.
	ResizeProcess(ctx context.Context, ref, pid string, size api.TtySize) (api.Process, error)
	// AttachProcess connects a client to a detached process until it ends
	// (its exit status) or ctx is done (the client detached: the process
	// runs on, ctx's error is returned). Errors before at.Started: 404
	// not_found; after it, a lost process (503 guest_died) or stdin the
	// process does not take (409 stdin_closed).
	AttachProcess(ctx context.Context, ref, pid string, at ProcessAttachment) (api.ExitStatus, error)
}

// ProcessAttachment is how AttachProcess connects a detached process to
// its client.
type ProcessAttachment struct {
	// Offset is where the output starts, a byte offset in the process's
	// combined output; nil means its current end (new output only).
	Offset *int64
	// Stdin is read until EOF (or ctx's end) and each piece written to
	// the process's stdin as it comes; its EOF leaves the process's stdin
	// open.
	Stdin io.Reader
	// Stdout and Stderr get the output from Offset on, following the
	// process; a slow writer slows this client only.
	Stdout, Stderr io.Writer
	// Started is called once before any output with the process's
	// controls, the process and the offset its output starts at.
	Started func(ctl ExecControl, p api.Process, offset int64)
	// Dropped is called when output from offset on fell out of the
	// guest's ring: n bytes are gone, the output goes on at offset+n.
	Dropped func(offset, n int64)
}

// TimeoutBackend is the part of a Backend that sets a sandbox's timeout;
// a Backend without it answers the route 501 not_implemented.
type TimeoutBackend interface {
	// SetTimeout makes the sandbox ref expire req.TimeoutSeconds from now
	// and returns it (expires_at shows the new expiry). Errors: 404
	// not_found.
	SetTimeout(ctx context.Context, ref string, req api.TimeoutRequest) (api.Sandbox, error)
}

// ForkBackend is the part of a SnapshotBackend that restores several
// sandboxes from one snapshot at once (a restore request with count > 1);
// a Backend without it answers such requests 501 not_implemented.
type ForkBackend interface {
	// RestoreSnapshots restores req.Count (> 1) sandboxes from the
	// snapshot concurrently, named req.Name-1 … req.Name-N, and returns
	// them in that order. All or nothing: on error none is left. Errors
	// as RestoreSnapshot's (429 capacity_exceeded when all of them do not
	// fit, before any is made).
	RestoreSnapshots(ctx context.Context, name string, req api.RestoreRequest) ([]api.Sandbox, error)
}

// LifecycleBackend is the part of a Backend that pauses, resumes and
// starts sandboxes again; a Backend without it answers those routes (and
// ?resume=true) 501 not_implemented.
type LifecycleBackend interface {
	// PauseSandbox pauses a running sandbox, in memory or to disk.
	// Errors: 404, 409 conflict (not running: the message says what to
	// do), 507 insufficient_storage (to disk; it keeps running).
	PauseSandbox(ctx context.Context, ref string, req api.PauseRequest) (api.Sandbox, error)
	// ResumeSandbox lets a paused sandbox run again in place. With
	// ifPaused a sandbox that is not paused is returned as it is (the
	// ?resume=true of exec, file and process calls). Errors: 404, 409
	// conflict (not paused), 422 snapshot_unusable (its saved state does
	// not load; the sandbox is failed), 429 capacity_exceeded.
	ResumeSandbox(ctx context.Context, ref string, ifPaused bool) (api.Sandbox, error)
	// StartSandbox boots a stopped (or failed) sandbox again on its kept
	// disk. Errors: 404, 409 conflict (running or paused), 422
	// invalid_image (its image cannot be loaded) or invalid_argument (its
	// disk is gone, or its image changed), 429 capacity_exceeded, 500
	// boot_failed.
	StartSandbox(ctx context.Context, ref string) (api.Sandbox, error)
}

// NodeBackend is the part of a Backend that serves a cluster's nodes
// (serve --cluster; vmctl/cluster); a Backend without it answers the
// /v1/nodes routes 501 not_implemented, as does a daemon outside a
// cluster.
type NodeBackend interface {
	// ListNodes lists the cluster's nodes by name. Errors: 503
	// cluster_unavailable while NATS is unreachable.
	ListNodes(ctx context.Context) ([]api.Node, error)
	// DrainNode stops (drain) or resumes (!drain) the named node's pulls
	// of creates; its sandboxes run on either way. Errors: 404 for an
	// unknown node, 503 cluster_unavailable.
	DrainNode(ctx context.Context, name string, drain bool) (api.Node, error)
}

// PortBackend is the part of a Backend that forwards ports (host
// listeners whose connections go to a guest port over the agent
// channel); a Backend without it answers the port routes 501
// not_implemented. Guest ports are 1–65535 (checked).
type PortBackend interface {
	// ForwardPort opens a host listener for the sandbox's guest port
	// (req validated). Errors: 404 not_found, 409 sandbox_not_running,
	// 409 conflict (host address in use, guest port forwarded already),
	// 400 invalid_argument (an address this host does not have), 403
	// permission_denied (a privileged port).
	ForwardPort(ctx context.Context, ref string, req api.PortForwardRequest) (api.PortForward, error)
	// ListPorts returns the sandbox's forwards by guest port. Errors: 404.
	ListPorts(ctx context.Context, ref string) ([]api.PortForward, error)
	// RemovePort closes the forward of guestPort. Errors: 404 not_found
	// (no such sandbox or forward).
	RemovePort(ctx context.Context, ref string, guestPort int) error
}

// SnapshotBackend is the part of a Backend that handles snapshots; a
// Backend without it answers the snapshot routes 501 not_implemented.
// Snapshot references (name) are a snapshot name or ID, syntax-checked.
type SnapshotBackend interface {
	// SaveSnapshot checkpoints the running sandbox ref live. Errors: 404
	// not_found, 409 sandbox_not_running, 409 name_taken, 507
	// insufficient_storage (the sandbox keeps running).
	SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error)
	// ListSnapshots lists snapshots oldest first; with sandbox != "" those
	// of that sandbox (ID or name; a removed sandbox by ID).
	ListSnapshots(ctx context.Context, sandbox string) ([]api.Snapshot, error)
	// GetSnapshot returns one snapshot. Errors: 404 not_found.
	GetSnapshot(ctx context.Context, name string) (api.Snapshot, error)
	// DeleteSnapshot removes a snapshot. Errors: 404 not_found.
	DeleteSnapshot(ctx context.Context, name string) error
	// RestoreSnapshot starts a new sandbox from the snapshot. Errors: 404,
	// 409 name_taken, 422 snapshot_unusable (image changed, file gone or
	// corrupt), 429 capacity_exceeded, 507 insufficient_storage.
	RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error)
}

// TemplateBackend is the part of a Backend that serves named templates
// (serve --template); a Backend without it answers GET /v1/templates 501
// not_implemented.
type TemplateBackend interface {
	// ListTemplates lists the templates by name, each with its image's
	// manifest defaults as the image loads now.
	ListTemplates(ctx context.Context) ([]api.Template, error)
}

// WarmBackend is the part of a Backend that manages warm templates; a
// Backend without it answers the warm routes 501 not_implemented.
type WarmBackend interface {
	// ListWarm lists the warm templates, most recently used first.
	ListWarm(ctx context.Context) ([]api.WarmTemplate, error)
	// DeleteWarm removes the template with key (syntax-checked) and its
	// pool's paused sandboxes; the next warm create of its shape builds
	// it again. Errors: 404 not_found.
	DeleteWarm(ctx context.Context, key string) error
}

// WatchBackend is the part of a Backend that watches files in sandboxes;
// a Backend without it answers the watch route 501 not_implemented.
type WatchBackend interface {
	// Watch watches path (recursive: the directories below it too) in the
	// sandbox: ready is called once the guest has the watch in place,
	// before any event, then emit for each event, until ctx ends or the
	// watched path itself went away (after its REMOVE or RENAME event):
	// both return nil. Errors before ready: 404 not_found (no such
	// sandbox or path), 409 sandbox_not_running; after it: 409
	// sandbox_not_running (stopped meanwhile), 503 guest_died, or
	// emit's and ready's own errors.
	Watch(ctx context.Context, ref, path string, recursive bool, ready func() error, emit func(api.WatchEvent) error) error
}
