package audit

import "time"

// Entry is one audit record: one JSON object per line of the audit log,
// one per action a caller took on a sandbox (or on the daemon).
type Entry struct {
	// Time is when the action started (RFC 3339 with nanoseconds in JSON).
	Time time.Time `json:"time"`
	// Sandbox is the sandbox ID ("" for daemon-wide actions).
	Sandbox string `json:"sandbox,omitempty"`
	// Caller identifies who asked: "uid:1000" (unix socket peer), "token"
	// (TCP bearer token), "tls:CN" (TLS client certificate), "daemon"
	// (TTL or idle reaper, reconciliation), "cli" (in-process `agentbox run`).
	Caller string `json:"caller"`
	// Tenant is the tenant the entry concerns (serve --tenants): the
	// sandbox's tenant, or the calling tenant's for an entry without a
	// sandbox (a refused create); "" for the admin's. A tenant reads
	// only its own entries.
	Tenant string `json:"tenant,omitempty"`
	// Action is one of the Action* constants.
	Action string `json:"action"`
	// Args holds the action's arguments: for exec the argv ("cmd"), cwd,
	// env keys, timeout; for files the path and mode; for create the image
	// and resources. Values are strings, numbers, booleans or lists.
	Args map[string]any `json:"args,omitempty"`
	// ExecID identifies an exec or detached process.
	ExecID string `json:"exec_id,omitempty"`
	// ExitCode is the shell-style exit code of an exec (nil otherwise).
	ExitCode *int `json:"exit_code,omitempty"`
	// DurationMs is the action's duration in milliseconds.
	DurationMs int64 `json:"duration_ms"`
	// BytesIn is what the caller sent (stdin, upload), in bytes.
	BytesIn int64 `json:"bytes_in,omitempty"`
	// BytesOut is what the caller got back (stdout+stderr, download).
	BytesOut int64 `json:"bytes_out,omitempty"`
	// Stdout and Stderr are digests of the command's output.
	Stdout *OutputDigest `json:"stdout,omitempty"`
	Stderr *OutputDigest `json:"stderr,omitempty"`
	// Stdin is the digest of what an attached exec got on its stdin (the
	// keys typed into a terminal, too); nil when it had none.
	Stdin *OutputDigest `json:"stdin,omitempty"`
	// Tty records a command that ran on a terminal: its input and output
	// with their timing, bounded (TtySession).
	Tty *TtySession `json:"tty,omitempty"`
	// Error is the API error code when the action failed, e.g.
	// "not_found"; ErrorMessage its message.
	Error        string `json:"error,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	// Policy holds the policy plugin's decisions on the action (serve
	// --policy): one per hook asked (a create asks create and network);
	// nil without a plugin.
	Policy []PolicyDecision `json:"policy,omitempty"`
}

// PolicyDecision is one decision of the policy plugin (vmctl/policy).
type PolicyDecision struct {
	// Hook is what was asked: create, exec, file, port or network.
	Hook string `json:"hook"`
	// Decision is allow, deny, modify, or unavailable (the plugin could
	// not decide: the call was refused, fail closed).
	Decision string `json:"decision"`
	// Reason is the plugin's reason (for unavailable, why it could not
	// decide).
	Reason string `json:"reason,omitempty"`
	// Rule names the rule that decided, as the plugin says.
	Rule string `json:"rule,omitempty"`
	// Changes are a modify's changes (keys in snake_case; env values are
	// left out, only their keys are kept).
	Changes map[string]any `json:"changes,omitempty"`
}

// OutputDigest summarises one output stream without keeping it whole.
type OutputDigest struct {
	// Bytes is the stream's full length.
	Bytes int64 `json:"bytes"`
	// SHA256 is the hex SHA-256 of the whole stream.
	SHA256 string `json:"sha256"`
	// Head is the stream's first bytes (at most HeadBytes), as text
	// (invalid UTF-8 replaced with U+FFFD).
	Head string `json:"head,omitempty"`
	// Truncated says Head is shorter than the stream.
	Truncated bool `json:"truncated,omitempty"`
}

// HeadBytes is the most output bytes an OutputDigest keeps.
const HeadBytes = 1024

// Actions.
const (
	ActionCreate         = "create"
	ActionStop           = "stop"
	ActionRemove         = "remove"
	ActionExec           = "exec"
	ActionProcessStart   = "process.start"
	ActionProcessStdin   = "process.stdin"
	ActionProcessKill    = "process.kill"
	ActionProcessExit    = "process.exit"
	ActionProcessAttach  = "process.attach" // a client was attached to a detached process (GET .../processes/{pid}/ws) until it detached or the process ended
	ActionUpload         = "file.upload"
	ActionDownload       = "file.download"
	ActionStat           = "file.stat"
	ActionList           = "file.list"
	ActionMkdir          = "file.mkdir"
	ActionDelete         = "file.remove"
	ActionMove           = "file.move"
	ActionWatch          = "file.watch"      // a file watch ended: its duration, ArgEvents
	ActionReap           = "reap"            // TTL or idle timeout reached
	ActionReconcile      = "reconcile"       // daemon start: adopted, failed or cleaned
	ActionStateChange    = "state"           // the sandbox changed state on its own (guest died)
	ActionSnapshotSave   = "snapshot.save"   // a snapshot of the sandbox was saved
	ActionSnapshotDelete = "snapshot.remove" // a snapshot of the sandbox was removed
	ActionRestore        = "restore"         // the sandbox was restored from a snapshot
	ActionPortOpen       = "port.open"       // a port forward's host listener was opened (or re-opened by a restarted daemon)
	ActionPortClose      = "port.close"      // a port forward was closed; args count its connections and bytes
	ActionTimeout        = "timeout"         // the sandbox's TTL was set from now
	ActionPause          = "pause"           // the sandbox was paused (in memory or to disk)
	ActionResume         = "resume"          // the paused sandbox was resumed
	ActionStart          = "start"           // the stopped sandbox was booted again
)

// ActionEgressIntercept: the egress proxy intercepted a guest's TLS
// connection to a host a secret is bound to, or refused a request in it
// (its Host is not the TLS server name); args name the host, port,
// upstream address and reason (vmctl/egress, vmctl/secrets).
const ActionEgressIntercept = "egress.intercept"
