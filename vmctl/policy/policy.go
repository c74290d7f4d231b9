// Package policy is the daemon's side of policy plugins: out-of-process
// programs (github.com/hashicorp/go-plugin over net/rpc) that the one
// sandbox service (vmctl/daemon) asks before it creates a sandbox, runs a
// command, reads or writes a guest file, forwards a port or sets a
// network policy. A plugin answers each Request with a Decision: allow,
// deny with a reason the caller sees, or modify (allow with a typed set
// of Changes of the request's hook). See docs/policy.md.
//
// The package holds the request and decision types (the wire shape,
// versioned by Handshake), the plugin plumbing a plugin's main calls
// (Serve) and the daemon's Client, which starts the plugin, bounds every
// call by a deadline, fails closed (ErrUnavailable) when the plugin
// crashes, hangs or answers nonsense, and restarts it on the next call
// with a backoff. vmctl/policy/rules is a rule engine for plugins, served
// by cmd/agentbox-policy.
package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Sentinels of a policy's refusal, answered through api.ErrorFrom.
var (
	// ErrDenied: the policy plugin denied the call; the message carries
	// its reason. 403 policy_denied.
	ErrDenied = errdefs.New(errdefs.ErrPermissionDenied, api.CodePolicyDenied, "denied by policy")
	// ErrUnavailable: the policy plugin could not decide (it crashed,
	// did not answer within the deadline, failed its handshake, answered
	// an invalid decision or is being restarted), so the call was refused
	// (fail closed). 503 policy_unavailable; retrying later may succeed.
	ErrUnavailable = errdefs.New(errdefs.ErrUnavailable, api.CodePolicyUnavailable, "policy plugin unavailable")
)

// Hook names the point at which the daemon asks the plugin. Its values
// are part of the plugin protocol and never change.
type Hook string

// The hooks.
const (
	// HookCreate: before a sandbox is created or restored from a
	// snapshot (Request.Create).
	HookCreate Hook = "create"
	// HookExec: before a command runs, attached, interactive or detached
	// (Request.Exec).
	HookExec Hook = "exec"
	// HookFile: before a guest file is read or written (Request.File).
	HookFile Hook = "file"
	// HookPort: before a port forward is opened (Request.Port).
	HookPort Hook = "port"
	// HookNetwork: before a sandbox's network policy is set, at create
	// (Request.Network).
	HookNetwork Hook = "network"
)

// Identity is who asks and about which sandbox, for rules by tenant.
type Identity struct {
	// Caller is the API caller's ID (api.Caller: "uid:1000", "token",
	// "tls:CN", "cli", ...).
	Caller string
	// Tenant is the tenant the request acts for (serve --tenants;
	// vmctl/tenant), "" for the admin. It is set whichever front the
	// request came through: REST ("tenant:NAME" callers), E2B (caller
	// "e2b") and MCP (the session's tenant) alike. A plugin built before
	// it was added reads no tenant (gob skips the field).
	Tenant string
	// Sandbox is the sandbox's ID; "" for a create.
	Sandbox string
	// Name is the sandbox's name (the requested one for a create).
	Name string
	// Labels are the sandbox's labels (the requested ones for a create).
	Labels map[string]string
	// Template is the sandbox's named template, "" when it was created
	// from an image directory.
	Template string
}

// Request is one question to the plugin: the hook, who asks, and the
// hook's arguments (exactly one of the pointers is set, the hook's).
type Request struct {
	// Hook says which of the arguments below is set.
	Hook Hook
	// Identity is who asks, and the sandbox's identity.
	Identity Identity
	// Create, Exec, File, Port and Network are the hook's arguments.
	Create  *CreateRequest
	Exec    *ExecRequest
	File    *FileRequest
	Port    *PortRequest
	Network *NetworkRequest
}

// CreateRequest describes a create (or a restore) as asked.
type CreateRequest struct {
	// Image is the image directory, "" when a template is named.
	Image string
	// Snapshot is the snapshot restored from; "" for a create.
	Snapshot string
	// VCPUs and MemoryMiB are as asked (0: the image's defaults).
	VCPUs     int
	MemoryMiB int
	// TTLSeconds, IdleTimeoutSeconds and ExecTimeoutMs are the lifetime
	// limits asked (0: the daemon's defaults).
	TTLSeconds         int64
	IdleTimeoutSeconds int64
	ExecTimeoutMs      int64
	// EnvKeys are the keys of the sandbox-wide environment (values may be
	// secrets and are not sent).
	EnvKeys []string
}

// Exec modes.
const (
	ExecAttached    = "attached"    // output streams to the caller (POST .../exec)
	ExecInteractive = "interactive" // stdin streams too (the WebSocket exec, `exec -i`)
	ExecDetached    = "detached"    // the guest keeps it (POST .../processes)
)

// ExecRequest describes a command.
type ExecRequest struct {
	// Argv is the command and its arguments.
	Argv []string
	// EnvKeys are the keys of the command's own environment (values may
	// be secrets and are not sent).
	EnvKeys []string
	// Cwd is the working directory ("" for the guest's default).
	Cwd string
	// User is the guest user asked ("" for the default); UID is set when
	// a numeric uid was asked instead.
	User string
	UID  *uint32
	// TimeoutMs is the timeout asked (0: the sandbox's default).
	TimeoutMs int64
	// Mode is ExecAttached, ExecInteractive or ExecDetached.
	Mode string
	// Tty says the command runs on a terminal.
	Tty bool
}

// File operations.
const (
	FileUpload   = "upload"
	FileDownload = "download"
	FileStat     = "stat"
	FileList     = "list"
	FileWatch    = "watch"
	FileMkdir    = "mkdir"
	FileMove     = "move"
	FileRemove   = "remove"
)

// Access says whether a file operation reads or writes.
const (
	AccessRead  = "read"
	AccessWrite = "write"
)

// FileRequest describes a file operation on guest paths.
type FileRequest struct {
	// Op is one of the File* operations.
	Op string
	// Access is AccessRead (download, stat, list, watch) or AccessWrite
	// (upload, mkdir, move, remove).
	Access string
	// Path is the guest path (a move's source), as asked.
	Path string
	// Destination is a move's destination.
	Destination string
}

// Paths returns the guest paths the operation touches.
func (f FileRequest) Paths() []string {
	if f.Destination != "" {
		return []string{f.Path, f.Destination}
	}
	return []string{f.Path}
}

// PortRequest describes a port forward.
type PortRequest struct {
	// GuestPort is the guest's TCP port.
	GuestPort int
	// HostAddr is the host address asked (host:port; port 0: any).
	HostAddr string
}

// NetworkRequest describes the network policy a sandbox is to get.
type NetworkRequest struct {
	// Mode is "none", "allowlist" or "open".
	Mode string
	// Allow lists the allowed destinations (vmctl/netpolicy's forms).
	Allow []string
}

// Verdict is a decision's kind. Its values are part of the plugin
// protocol and never change.
type Verdict string

// The verdicts.
const (
	// Allow lets the call go on as asked.
	Allow Verdict = "allow"
	// Deny refuses it: the caller gets 403 policy_denied with the reason.
	Deny Verdict = "deny"
	// Modify lets it go on with the decision's changes (those of the
	// request's hook) applied first.
	Modify Verdict = "modify"
)

// Decision is the plugin's answer.
type Decision struct {
	// Verdict is Allow, Deny or Modify.
	Verdict Verdict
	// Reason says why (required for Deny: the caller sees it; optional
	// otherwise, recorded in the audit log).
	Reason string
	// Rule names the rule that decided, for the audit log ("" if none).
	Rule string
	// Create, Exec, File, Port and Network are the changes of a Modify,
	// only the request's hook's.
	Create  *CreateChanges
	Exec    *ExecChanges
	File    *FileChanges
	Port    *PortChanges
	Network *NetworkChanges
}

// CreateChanges change a create: caps on what it asks, and its labels
// and sandbox-wide environment. Zero fields change nothing.
type CreateChanges struct {
	// MaxVCPUs and MaxMemoryMiB cap the sandbox's size (a create asking
	// for more, or for the image's default when that is more, gets the
	// cap).
	MaxVCPUs     int
	MaxMemoryMiB int
	// MaxTTLSeconds and MaxIdleTimeoutSeconds cap its lifetime (no TTL or
	// idle timeout asked, or a longer one, becomes the cap).
	MaxTTLSeconds         int64
	MaxIdleTimeoutSeconds int64
	// MaxExecTimeoutMs caps the default timeout of its commands.
	MaxExecTimeoutMs int64
	// SetLabels are added to the sandbox's labels (replacing those of the
	// same key).
	SetLabels map[string]string
	// StripEnv removes the sandbox-wide environment entries whose keys
	// match one of these globs (`*` any run of characters, `?` one).
	StripEnv []string
}

// ExecChanges change a command. Zero fields change nothing.
type ExecChanges struct {
	// MaxTimeoutMs forces a timeout: a command asking for none (and whose
	// sandbox has no default), or for a longer one, gets this one.
	MaxTimeoutMs int64
	// StripEnv removes the command's environment entries whose keys match
	// one of these globs (`*`, `?`), e.g. "AWS_*".
	StripEnv []string
	// SetEnv sets environment entries (after StripEnv).
	SetEnv map[string]string
	// User runs the command as this guest user instead of the one asked
	// (a numeric uid asked is dropped).
	User string
}

// FileChanges change a file write. Zero fields change nothing.
type FileChanges struct {
	// Owner makes what an upload, mkdir or move writes owned by this
	// guest user (api.UploadRequest.Owner).
	Owner string
}

// PortChanges change a port forward. Zero fields change nothing.
type PortChanges struct {
	// HostAddr replaces the host address the forward listens on (e.g.
	// "127.0.0.1:0" to keep it to loopback).
	HostAddr string
}

// NetworkChanges change a network policy. Zero fields change nothing.
type NetworkChanges struct {
	// Mode replaces the mode ("none", "allowlist", "open").
	Mode string
	// Allow, when not nil, replaces the allowed destinations.
	Allow []string
}

// Validate checks a decision against the request it answers: a known
// verdict, a reason for a deny, changes only of the request's hook and
// only with Modify. A plugin's invalid decision fails the call closed.
func (d Decision) Validate(hook Hook) error {
	set := map[Hook]bool{HookCreate: d.Create != nil, HookExec: d.Exec != nil, HookFile: d.File != nil, HookPort: d.Port != nil, HookNetwork: d.Network != nil}
	var others []string
	for h, on := range set {
		if on && h != hook {
			others = append(others, string(h))
		}
	}
	slices.Sort(others)
	switch {
	case len(others) > 0:
		return fmt.Errorf("changes of hook %s in a decision on %s", strings.Join(others, ", "), hook)
	case d.Verdict == Deny && strings.TrimSpace(d.Reason) == "":
		return fmt.Errorf("deny without a reason")
	case d.Verdict == Modify && !set[hook]:
		return fmt.Errorf("modify without changes of hook %s", hook)
	case (d.Verdict == Allow || d.Verdict == Deny) && set[hook]:
		return fmt.Errorf("%s with changes: answer modify", d.Verdict)
	case d.Verdict != Allow && d.Verdict != Deny && d.Verdict != Modify:
		return fmt.Errorf("unknown verdict %q (allow, deny or modify)", d.Verdict)
	}
	return nil
}

// Changes returns the decision's changes as a flat map for the audit log
// (keys the changes' fields in snake_case), nil when there are none.
func (d Decision) Changes() map[string]any {
	m := map[string]any{}
	put := func(k string, v any, set bool) {
		if set {
			m[k] = v
		}
	}
	if c := d.Create; c != nil {
		put("max_vcpus", c.MaxVCPUs, c.MaxVCPUs > 0)
		put("max_memory_mib", c.MaxMemoryMiB, c.MaxMemoryMiB > 0)
		put("max_ttl_seconds", c.MaxTTLSeconds, c.MaxTTLSeconds > 0)
		put("max_idle_timeout_seconds", c.MaxIdleTimeoutSeconds, c.MaxIdleTimeoutSeconds > 0)
		put("max_exec_timeout_ms", c.MaxExecTimeoutMs, c.MaxExecTimeoutMs > 0)
		put("set_labels", c.SetLabels, len(c.SetLabels) > 0)
		put("strip_env", c.StripEnv, len(c.StripEnv) > 0)
	}
	if c := d.Exec; c != nil {
		put("max_timeout_ms", c.MaxTimeoutMs, c.MaxTimeoutMs > 0)
		put("strip_env", c.StripEnv, len(c.StripEnv) > 0)
		put("set_env_keys", sortedKeys(c.SetEnv), len(c.SetEnv) > 0) // values may be secrets
		put("user", c.User, c.User != "")
	}
	if c := d.File; c != nil {
		put("owner", c.Owner, c.Owner != "")
	}
	if c := d.Port; c != nil {
		put("host_addr", c.HostAddr, c.HostAddr != "")
	}
	if c := d.Network; c != nil {
		put("mode", c.Mode, c.Mode != "")
		put("allow", c.Allow, c.Allow != nil)
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// MatchKey reports whether an environment key matches glob: `*` matches
// any run of characters, `?` any one, everything else itself.
func MatchKey(glob, key string) bool {
	return matchText(glob, key)
}

// matchText is a glob match over runes where `*` crosses everything.
func matchText(glob, s string) bool {
	g, t := []rune(glob), []rune(s)
	// Iterative matching with one backtrack point (the last star).
	gi, ti, star, mark := 0, 0, -1, 0
	for ti < len(t) {
		switch {
		case gi < len(g) && (g[gi] == '?' || g[gi] == t[ti]) && g[gi] != '*':
			gi++
			ti++
		case gi < len(g) && g[gi] == '*':
			star, mark = gi, ti
			gi++
		case star >= 0:
			gi = star + 1
			mark++
			ti = mark
		default:
			return false
		}
	}
	for gi < len(g) && g[gi] == '*' {
		gi++
	}
	return gi == len(g)
}

// StripEnv returns env ("KEY=VALUE" entries) without those whose keys
// match one of globs.
func StripEnv(env []string, globs []string) []string {
	if len(globs) == 0 {
		return env
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(globs, func(g string) bool { return MatchKey(g, k) }) {
			out = append(out, kv)
		}
	}
	return out
}

// SetEnv returns env with set's entries replacing or appended after
// those of the same key, in key order.
func SetEnv(env []string, set map[string]string) []string {
	if len(set) == 0 {
		return env
	}
	out := StripEnv(env, nil)
	out = slices.DeleteFunc(slices.Clone(out), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ok := set[k]
		return ok
	})
	for _, k := range sortedKeys(set) {
		out = append(out, k+"="+set[k])
	}
	return out
}
