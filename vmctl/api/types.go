package api

import (
	"time"
)

// Sandbox states, as the sandbox manager's state machine names them:
// creating → running → stopping → stopped; running ⇄ paused (pause,
// resume); stopped or failed → creating again (start); any state may end
// in failed.
const (
	StateCreating = "creating"
	StateRunning  = "running"
	StatePaused   = "paused"
	StateStopping = "stopping"
	StateStopped  = "stopped"
	StateFailed   = "failed"
)

// Sandbox is the API's view of one sandbox (GET /v1/sandboxes/{id}).
type Sandbox struct {
	// ID is 12 lowercase hex digits, unique per daemon.
	ID string `json:"id"`
	// Name is the user's name for it, unique among the daemon's sandboxes;
	// empty when none was given. Names match NamePattern.
	Name string `json:"name,omitempty"`
	// Node is the name of the cluster node the sandbox lives on (serve
	// --node); empty on a single host (serve without --cluster).
	Node string `json:"node,omitempty"`
	// State is one of the State* constants (StateUnknown only in a
	// cluster's list, for a sandbox whose node does not answer).
	State string `json:"state"`
	// Reason says why the sandbox is failed or stopped, e.g. "domain
	// vanished while the daemon was down" or "ttl reached".
	Reason string `json:"reason,omitempty"`
	// Image is the image the sandbox booted.
	Image ImageRef `json:"image"`
	// Template is the name of the template (GET /v1/templates) the
	// sandbox was created from; empty for one created from an image
	// directory or restored from a snapshot.
	Template string `json:"template,omitempty"`
	// Tenant is the tenant that owns the sandbox (serve --tenants; see
	// docs/tenants.md); empty for the admin's (the unix socket, the
	// daemon's --token-file token).
	Tenant string `json:"tenant,omitempty"`
	// Domain is the libvirt domain name ("agentbox-" + ID).
	Domain string `json:"domain"`
	// Accel is the accelerator the domain runs with: "kvm" or "tcg".
	Accel string `json:"accel"`
	// VCPUs is the number of virtual CPUs.
	VCPUs int `json:"vcpus"`
	// MemoryMiB is the guest memory in MiB.
	MemoryMiB int `json:"memory_mib"`
	// Labels are the user's key/value labels (list filters match them).
	Labels map[string]string `json:"labels,omitempty"`
	// CreatedAt is when the create request was accepted.
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when the guest agent first answered (nil before).
	StartedAt *time.Time `json:"started_at,omitempty"`
	// StoppedAt is when the sandbox reached stopped or failed (nil before).
	StoppedAt *time.Time `json:"stopped_at,omitempty"`
	// LastActivityAt is the end of the last exec or file operation (the
	// idle timeout counts from it), or StartedAt.
	LastActivityAt *time.Time `json:"last_activity_at,omitempty"`
	// BootMs is the time from domain start to the agent's handshake, in
	// milliseconds.
	BootMs int64 `json:"boot_ms,omitempty"`
	// Tainted lists the libvirt taints agentbox's own domain
	// configuration gives the sandbox's domain: "custom-argv" when its
	// QEMU command line carries passthrough arguments (a warm sandbox
	// cloned from a memory template, see docs/snapshots.md, and what is
	// restarted or restored from one). Empty for other sandboxes.
	Tainted []string `json:"tainted,omitempty"`
	// QEMU is the sandbox's QEMU process and its confinement, read from
	// /proc/PID/status: only in GET /v1/sandboxes/{id} (not in lists),
	// and only while a QEMU runs. See docs/security.md.
	QEMU *QEMUProcess `json:"qemu,omitempty"`
	// ExecCount is the number of commands run so far (attached and
	// detached).
	ExecCount int `json:"exec_count"`
	// Limits are the sandbox's lifetime limits (TTL, idle timeout, exec
	// timeout, max execs), enforced by the daemon; its host-side machine
	// limits are Resources.
	Limits Limits `json:"limits"`
	// ExpiresAt is CreatedAt + Limits.TTLSeconds (nil without a TTL).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Network is the sandbox's network policy and addresses (network.go).
	Network *NetworkInfo `json:"network,omitempty"`
	// Resources are the sandbox's host-side machine limits (disk, CPU
	// quota, I/O, pids, QEMU memory) and how each is enforced
	// (resources.go); nil for sandboxes made before they existed. Its
	// lifetime limits are Limits.
	Resources *Resources `json:"resources,omitempty"`
	// Usage is the latest sample of its resource use (running sandboxes
	// only; resources.go).
	Usage *Usage `json:"usage,omitempty"`
	// Ports are the sandbox's port forwards (ports.go), by guest port.
	Ports []PortForward `json:"ports,omitempty"`
	// Paused says how a paused sandbox is paused and what its saved state
	// costs (lifecycle.go); nil unless paused.
	Paused *PauseInfo `json:"paused,omitempty"`
	// Secrets are the sandbox's secrets as the guest knows them: names,
	// placeholders and hosts, never values (secrets.go).
	Secrets []SecretInfo `json:"secrets,omitempty"`
}

// ImageRef names an image.
type ImageRef struct {
	// Name is the manifest's name.
	Name string `json:"name"`
	// Digest is "sha256:" + 64 hex digits of the image's base disk.
	Digest string `json:"digest"`
	// Dir is the image directory on the daemon's host.
	Dir string `json:"dir"`
}

// Limits are a sandbox's lifetime limits, enforced by the daemon: how
// long it lives (TTL, idle timeout) and how its commands are bounded
// (exec timeout, max execs). They are not its host-side machine limits
// (Resources). Zero means "none" (or, in a create request, "the daemon's
// default").
type Limits struct {
	// TTLSeconds: the sandbox is stopped and removed this many seconds
	// after creation.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// IdleTimeoutSeconds: the sandbox is stopped and removed after this
	// many seconds without an exec or file operation.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// ExecTimeoutMs is the default timeout of each command, in
	// milliseconds, when its request gives none.
	ExecTimeoutMs int64 `json:"exec_timeout_ms,omitempty"`
	// MaxExecs is the most commands the sandbox may run over its life;
	// the next one is refused with 429 exec_limit_reached.
	MaxExecs int `json:"max_execs,omitempty"`
	// IdleAction is what the idle timeout does: one of the IdleAction*
	// constants; "" (and the default) is IdleActionRemove.
	IdleAction string `json:"idle_action,omitempty"`
	// PausedTTLSeconds: a sandbox paused to disk is removed this many
	// seconds after its pause (its own retention, usually longer than the
	// idle timeout).
	PausedTTLSeconds int64 `json:"paused_ttl_seconds,omitempty"`
	// TTLAction is what reaching the TTL does: one of the IdleAction*
	// constants (remove, stop, pause, pause-to-disk); "" (and the
	// default) is IdleActionRemove. Any other action ends the TTL (the
	// sandbox is kept, stopped or paused, until a new timeout is set: E2B's
	// autoPause; lifecycle.go).
	TTLAction string `json:"ttl_action,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// Image is the image directory on the daemon's host (holds
	// manifest.toml). Give it or Template, not both.
	Image string `json:"image,omitempty"`
	// Template names one of the daemon's templates (GET /v1/templates,
	// serve --template NAME=DIR|PROFILE) whose image the sandbox boots; an
	// unknown one is answered 404 template_not_found.
	Template string `json:"template,omitempty"`
	// Name is optional; it must match NamePattern and be unused.
	Name string `json:"name,omitempty"`
	// VCPUs and MemoryMiB override the image's defaults when > 0.
	VCPUs     int `json:"vcpus,omitempty"`
	MemoryMiB int `json:"memory_mib,omitempty"`
	// Accel is "auto" (default), "kvm" or "tcg".
	Accel string `json:"accel,omitempty"`
	// BootTimeoutMs bounds the boot, in milliseconds; 0 means 120000.
	BootTimeoutMs int64 `json:"boot_timeout_ms,omitempty"`
	// Labels are at most 64 key/value pairs; keys match LabelKeyPattern,
	// values are at most 256 bytes.
	Labels map[string]string `json:"labels,omitempty"`
	// Limits override the daemon's defaults where non-zero.
	Limits Limits `json:"limits,omitempty"`
	// Env holds "KEY=VALUE" entries every command of the sandbox gets in
	// its environment (E2B's envVars); an exec's own Env overrides them
	// key by key. At most MaxEnv entries (CheckEnv says the syntax).
	Env []string `json:"env,omitempty"`
	// Warm starts the sandbox from the image's saved "ready" state
	// instead of booting it (built by the first warm create of an image
	// and machine shape, which boots once).
	Warm bool `json:"warm,omitempty"`
	// Network is the sandbox's network policy; nil means mode none.
	Network *NetworkPolicy `json:"network,omitempty"`
	// DiskMiB is the root disk's size in MiB, at least the image's disk;
	// the guest's root file system grows to it. 0: the image's default.
	DiskMiB int64 `json:"disk_mib,omitempty"`
	// CPUQuotaPercent caps the whole VM at this percentage of one host
	// CPU (50: half a CPU; 200: two). 0: the image's default, else none.
	CPUQuotaPercent int `json:"cpu_quota_percent,omitempty"`
	// IOBps and IOPS throttle the root disk, reads and writes together,
	// in bytes per second and operations per second. 0: none.
	IOBps int64 `json:"io_bps,omitempty"`
	IOPS  int64 `json:"iops,omitempty"`
	// IOWeight is the relative block I/O weight, 100..1000. 0: none.
	IOWeight int `json:"io_weight,omitempty"`
	// Pids caps the host tasks (processes and threads) of the sandbox's
	// QEMU process. 0: 256.
	Pids int64 `json:"pids,omitempty"`
	// NetBps caps the sandbox's network traffic in each direction (to
	// and from the guest) at this average rate in bytes per second, with
	// bursts of a tenth of a second at line speed, on the host's tap
	// (traffic control; resources.enforcement says per direction). It
	// needs a network (mode allowlist or open); at least 65536. 0: none
	// (or the daemon's ceiling).
	NetBps int64 `json:"net_bps,omitempty"`
	// Secrets are values the guest never sees (secrets.go): it gets a
	// placeholder in its environment instead, which the host's egress
	// proxy replaces by the value in the headers of HTTPS requests to the
	// secret's hosts. They need network mode allowlist with the hosts
	// allowed, and a cold boot (not Warm).
	Secrets []SecretSpec `json:"secrets,omitempty"`
	// Priority is the create's priority class: "low", "normal" (the
	// default, also for "") or "high" (the Priority* constants); a
	// tenant's creates may ask at most its max_priority (403 otherwise).
	// A single host records it; a cluster serves higher classes first.
	Priority string `json:"priority,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec and
// POST /v1/sandboxes/{id}/processes.
type ExecRequest struct {
	// Cmd is the argv, run without a shell; at least one element, no NUL.
	Cmd []string `json:"cmd"`
	// Env holds "KEY=VALUE" entries added to the guest's environment.
	Env []string `json:"env,omitempty"`
	// Cwd is the absolute working directory in the guest; empty means "/".
	Cwd string `json:"cwd,omitempty"`
	// UID and GID, if set, are the user and group the command runs as.
	UID *uint32 `json:"uid,omitempty"`
	GID *uint32 `json:"gid,omitempty"`
	// User, if set, is the guest account the command runs as, by name (or
	// uid as text), looked up in the guest's /etc/passwd by the guest
	// agent: its uid and primary gid, HOME, USER and LOGNAME, and its home
	// as the working directory when Cwd is empty ("/" if the home is not a
	// directory). An unknown user fails the start like a missing command
	// (exit 126, Error says so). Not together with UID or GID.
	User string `json:"user,omitempty"`
	// TimeoutMs bounds the command's run time in milliseconds; 0 means the
	// sandbox's Limits.ExecTimeoutMs (which may be 0: no limit).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Stdin is given to the command whole (base64 in JSON); nil means
	// /dev/null for attached execs. Detached processes take stdin later
	// through their stdin endpoint when StdinOpen is set.
	Stdin []byte `json:"stdin,omitempty"`
	// StdinOpen (detached processes only) keeps the command's stdin open
	// after Stdin, for POST .../processes/{pid}/stdin.
	StdinOpen bool `json:"stdin_open,omitempty"`
	// Tty, if set, runs the command on a pseudo-terminal of that size in
	// the guest: the terminal is its stdin, stdout and stderr (all output
	// comes as stdout), TERM is xterm-256color unless Env sets it, and the
	// interactive exec (GET .../exec/ws) can resize it. A detached process
	// on a terminal always has its stdin open, is resized with POST
	// .../processes/{pid}/resize and attached with GET .../processes/{pid}/ws.
	Tty *TtySize `json:"tty,omitempty"`
}

// Exec event types: the "type" of an ExecEvent.
const (
	EventStarted = "started" // the command runs: ExecID (and Pid)
	EventStdout  = "stdout"  // Data holds stdout bytes
	EventStderr  = "stderr"  // Data holds stderr bytes
	EventExit    = "exit"    // Exit holds the exit status; the last event
	EventError   = "error"   // Error says why the exec ended without a status; the last event
)

// ExecEvent is one line of an exec's output stream (application/x-ndjson):
// POST /v1/sandboxes/{id}/exec answers "started", then "stdout"/"stderr"
// events in the order the bytes arrived, then exactly one "exit" or
// "error".
type ExecEvent struct {
	// Type is one of the Event* constants.
	Type string `json:"type"`
	// ExecID identifies the exec in the sandbox's history and audit log
	// ("started" only).
	ExecID string `json:"exec_id,omitempty"`
	// Pid is the guest process id ("started" only).
	Pid int `json:"pid,omitempty"`
	// Data is a chunk of output (base64 in JSON).
	Data []byte `json:"data,omitempty"`
	// Offset is the position of Data in the process's combined output, in
	// bytes (detached processes: resume a stream with ?offset=).
	Offset int64 `json:"offset,omitempty"`
	// Exit is set on "exit".
	Exit *ExitStatus `json:"exit,omitempty"`
	// Error is set on "error".
	Error *Error `json:"error,omitempty"`
}

// ExitStatus is how a command ended.
type ExitStatus struct {
	// ExitCode is the shell-style code: the command's own; 128+N when
	// killed by signal N; 124 on timeout; 127 not found; 126 any other
	// start failure (not executable, permission, bad working directory).
	ExitCode int `json:"exit_code"`
	// Signal is the number of the signal that killed it, 0 if none.
	Signal int `json:"signal,omitempty"`
	// TimedOut is set when the timeout killed it.
	TimedOut bool `json:"timed_out,omitempty"`
	// TimeoutMs is, when TimedOut, the timeout that killed it in
	// milliseconds: the request's, else the sandbox's exec_timeout_ms,
	// as a policy plugin may have capped either (docs/policy.md). 0 when
	// not known (a detached process's status).
	TimeoutMs int64 `json:"timeout_ms,omitempty"`
	// Error says why the command could not start, e.g.
	// "python4: command not found".
	Error string `json:"error,omitempty"`
	// DurationMs is the command's wall time in milliseconds.
	DurationMs int64 `json:"duration_ms"`
}

// Process states.
const (
	ProcessRunning = "running" // still running
	ProcessExited  = "exited"  // ended; Exit is set
	ProcessLost    = "lost"    // its end could not be learnt (guest death, sandbox stopped)
)

// Process is a detached command (POST /v1/sandboxes/{id}/processes). It
// is the REST form of the host's vmctl/process.Info (which says why a
// detached process has three types): this package links the standard
// library only.
type Process struct {
	// ID is the process id in the API, unique within its sandbox (the
	// exec id).
	ID string `json:"id"`
	// Pid is the guest process id.
	Pid int `json:"pid"`
	// Cmd is its argv.
	Cmd []string `json:"cmd"`
	// State is one of the Process* constants.
	State string `json:"state"`
	// Exit is set once State is "exited".
	Exit *ExitStatus `json:"exit,omitempty"`
	// StdinOpen says whether .../stdin still accepts bytes (always, while
	// it runs, for a process on a terminal).
	StdinOpen bool `json:"stdin_open"`
	// Tty is the current size of its terminal when it was started with
	// one (POST .../processes/{pid}/resize changes it); absent without.
	Tty *TtySize `json:"tty,omitempty"`
	// OutputBytes is the total of stdout and stderr bytes produced.
	OutputBytes int64 `json:"output_bytes"`
	// OutputDropped is how many of the oldest output bytes fell out of the
	// per-process ring the guest agent keeps (the last 1 MiB).
	OutputDropped int64 `json:"output_dropped,omitempty"`
	// StartedAt and EndedAt bound its run.
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
}

// KillRequest is the body of POST .../processes/{pid}/kill.
type KillRequest struct {
	// Signal is a name ("TERM", "SIGKILL") or number; empty means KILL.
	Signal string `json:"signal,omitempty"`
}

// File types of FileInfo.Type.
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
	FileOther   = "other"
)

// FileInfo describes a path in a sandbox.
type FileInfo struct {
	// Name is the base name.
	Name string `json:"name"`
	// Path is the absolute guest path.
	Path string `json:"path"`
	// Type is one of the File* constants.
	Type string `json:"type"`
	// Size is the length in bytes.
	Size int64 `json:"size"`
	// Mode is the permission bits as an octal string, e.g. "0644".
	Mode string `json:"mode"`
	// ModTime is the modification time.
	ModTime time.Time `json:"mod_time"`
	// Owner and Group name the file's owner and group from the guest's
	// /etc/passwd and /etc/group (the number in decimal when unnamed;
	// empty from a guest agent that predates them).
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// LinkTarget is set when Path itself is a symbolic link: the absolute
	// path it resolves to, or the link's text when it does not resolve.
	LinkTarget string `json:"link_target,omitempty"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{id}/files/mkdir.
type MkdirRequest struct {
	// Path is the absolute guest path.
	Path string `json:"path"`
	// Mode is the octal permission string; empty means "0755".
	Mode string `json:"mode,omitempty"`
	// Parents creates missing parents (mkdir -p).
	Parents bool `json:"parents,omitempty"`
	// Owner is the guest account (name or numeric uid) the directories
	// made belong to; empty means the guest agent's default user.
	Owner string `json:"owner,omitempty"`
}

// Event types of Event.Type.
const (
	EventSandboxCreated = "sandbox.created" // a create was accepted
	EventSandboxState   = "sandbox.state"   // the sandbox entered State
	EventSandboxRemoved = "sandbox.removed" // the sandbox was deleted
	// Snapshot events: Sandbox is the snapshotted sandbox, Reason names
	// the snapshot ("snapshot NAME").
	EventSnapshotSaved   = "snapshot.saved"
	EventSnapshotRemoved = "snapshot.removed"
)

// Event is one line of GET /v1/events (application/x-ndjson).
type Event struct {
	// Time is when it happened.
	Time time.Time `json:"time"`
	// Type is one of the EventSandbox* constants.
	Type string `json:"type"`
	// Sandbox is the sandbox ID; Name its name.
	Sandbox string `json:"sandbox"`
	Name    string `json:"name,omitempty"`
	// State is the state entered, Reason why.
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Tenant is the sandbox's tenant (Sandbox.Tenant); a tenant's event
	// stream carries only its own sandboxes' events.
	Tenant string `json:"tenant,omitempty"`
}

// Info is GET /v1/info: what the daemon is and what it can still take.
type Info struct {
	// Version is the daemon's build version.
	Version string `json:"version"`
	// API is the API version, "v1".
	API string `json:"api"`
	// Capacity is the host's commitment budget and its use.
	Capacity Capacity `json:"capacity"`
	// Sandboxes counts the daemon's sandboxes by state.
	Sandboxes map[string]int `json:"sandboxes"`
}

// Capacity is what the daemon may commit to sandboxes (admission control)
// and what running and creating sandboxes hold.
type Capacity struct {
	MemoryMiB     int `json:"memory_mib"`
	VCPUs         int `json:"vcpus"`
	UsedMemoryMiB int `json:"used_memory_mib"`
	UsedVCPUs     int `json:"used_vcpus"`
}

// ExecRecord is one command in a sandbox's exec history (GET
// /v1/sandboxes/{id}/execs), kept in the daemon's store until the sandbox
// is removed.
type ExecRecord struct {
	// ID is the exec id ("e000001", …), also the detached process id.
	ID string `json:"id"`
	// Cmd is the argv; Cwd the working directory ("" means "/").
	Cmd []string `json:"cmd"`
	Cwd string   `json:"cwd,omitempty"`
	// Detached is set for processes started with POST .../processes.
	Detached bool `json:"detached,omitempty"`
	// Caller is who ran it (see the audit log's caller).
	Caller string `json:"caller,omitempty"`
	// StartedAt and EndedAt bound the run; EndedAt is absent while it runs
	// (or when the daemon lost it).
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// ExitCode is the shell-style exit code; absent while running or when
	// the command was lost.
	ExitCode *int `json:"exit_code,omitempty"`
	// Signal is the number of the signal that killed it, 0 if none.
	Signal int `json:"signal,omitempty"`
	// TimedOut is set when its timeout killed it.
	TimedOut bool `json:"timed_out,omitempty"`
	// Error says why it could not start or was lost.
	Error string `json:"error,omitempty"`
	// BytesIn is the stdin it got; BytesOut its stdout plus stderr.
	BytesIn  int64 `json:"bytes_in,omitempty"`
	BytesOut int64 `json:"bytes_out,omitempty"`
}

// QEMUProcess is a sandbox's QEMU process as the host sees it
// (/proc/PID/status), so operators and tests see its confinement.
type QEMUProcess struct {
	// PID is the process id.
	PID int `json:"pid"`
	// UID and GID are its real user and group ids: the sandbox's own
	// (serve --qemu-uid-range; a memory template's clone has the clone
	// group) or qemu.conf's user (0 for root) without a range.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Groups are its supplementary groups (under a per-sandbox uid only
	// its gid: libvirt sets the groups to the label's group).
	Groups []uint32 `json:"groups"`
	// Seccomp is its seccomp mode: 0 off, 1 strict, 2 filter (QEMU's
	// -sandbox on, libvirt's qemu.conf seccomp_sandbox = 1).
	Seccomp int `json:"seccomp"`
	// ConfiguredUID is the uid the daemon gave the sandbox (Record's), 0
	// when QEMU runs as qemu.conf's user.
	ConfiguredUID uint32 `json:"configured_uid,omitempty"`
}
