package sandbox

import (
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// This file is the sandbox's account: its limits, command count and last
// activity (what its expiry and idle action read), kept in its record,
// and the busy gate commands and file operations pass (BeginExec, Busy).
// It holds no decision about a command: the bookkeeping of each (its
// count against MaxExecs, its ID, its defaults, history and audit) is the
// daemon's exec service's (vmctl/daemon/exec.go, execCount), run under
// BeginExec's lock. The guest-facing calls are in guest.go.

// ExecLimits are a sandbox's limits on its commands and its life. Zero
// means no limit. The fields and their JSON names are those of the REST
// API's Limits (vmctl/api), so the two convert into each other.
type ExecLimits struct {
	// TTLSeconds: the sandbox expires this many seconds after creation.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// IdleTimeoutSeconds: the sandbox expires after this many seconds
	// without a command or file operation.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// ExecTimeoutMs is the default timeout of each command, in
	// milliseconds, when its request gives none.
	ExecTimeoutMs int64 `json:"exec_timeout_ms,omitempty"`
	// MaxExecs is the most commands the sandbox may run over its life;
	// the daemon's exec service refuses the next one with ErrExecLimit.
	MaxExecs int `json:"max_execs,omitempty"`
	// IdleAction is what the idle timeout does to the sandbox (the
	// daemon's reaper reads it: remove, stop, pause, pause-to-disk; ""
	// is remove).
	IdleAction string `json:"idle_action,omitempty"`
	// PausedTTLSeconds: a sandbox paused to disk expires this many
	// seconds after it was paused (Expired says ExpiredPausedTTL).
	PausedTTLSeconds int64 `json:"paused_ttl_seconds,omitempty"`
	// TTLAction is what reaching the TTL does (the daemon's reaper reads
	// it: remove, stop, pause, pause-to-disk; "" is remove). Any but
	// remove ends the TTL (ClearTTL) as it acts.
	TTLAction string `json:"ttl_action,omitempty"`
}

// Why Expired says a sandbox expired.
const (
	ExpiredTTL       = "ttl reached"
	ExpiredIdle      = "idle timeout reached"
	ExpiredPausedTTL = "paused ttl reached"
)

// ExecAccount is a sandbox's exec accounting. It is kept as JSON in the
// record's Extra (Encode), so it survives a restart of the process that
// manages the sandbox, and a snapshot carries it to its restores.
type ExecAccount struct {
	// Limits are the sandbox's limits.
	Limits ExecLimits `json:"limits"`
	// ExecCount is how many commands (attached and detached) have begun.
	ExecCount int `json:"exec_count"`
	// LastActivity is when the last command or file operation ended
	// (UTC); the idle timeout counts from it. Zero means the sandbox's
	// start.
	LastActivity time.Time `json:"last_activity,omitzero"`
	// Creator is the caller that created the sandbox (the API's caller
	// id), or "".
	Creator string `json:"creator,omitempty"`
	// Env holds the "KEY=VALUE" entries every command gets (the create
	// request's env); the daemon's exec service puts them before the
	// command's own, which override them key by key.
	Env []string `json:"env,omitempty"`
}

// Encode returns a as the JSON kept in Record.Extra (Options.Extra,
// RestoreOptions.Extra).
func (a ExecAccount) Encode() []byte {
	raw, err := json.Marshal(a)
	if err != nil {
		panic(fmt.Sprintf("sandbox: encode exec account: %v", err)) // plain fields: cannot fail
	}
	return raw
}

// DecodeExecAccount reads the accounting kept in a Record's or a
// SnapshotRecord's Extra; empty raw is the zero account.
func DecodeExecAccount(raw []byte) (ExecAccount, error) {
	var a ExecAccount
	if len(raw) == 0 {
		return a, nil
	}
	if err := json.Unmarshal(raw, &a); err != nil {
		return ExecAccount{}, fmt.Errorf("exec accounting in the record: %w", err)
	}
	return a, nil
}

// execAccount is the live accounting of a Sandbox: set from its record's
// Extra where the record gets it (loadAccount: StepRegister, adoption),
// or read from the record on first use by a Sandbox made otherwise.
type execAccount struct {
	once sync.Once
	mu   sync.Mutex
	a    ExecAccount
	busy int // commands and file operations in flight (never idle while > 0)
	// idling is non-nil while an idle action runs (RunIfIdle, idle.go)
	// and closed when it ended.
	idling chan struct{}
}

// account returns sb's accounting, reading it from the record's Extra on
// first use unless loadAccount set it.
func (sb *Sandbox) account() *execAccount {
	sb.acct.once.Do(func() { sb.acct.a = sb.decodeAccount() })
	return &sb.acct
}

// loadAccount sets sb's accounting from its record's Extra, replacing
// whatever an earlier account() read (before StepRegister gave the record
// its Extra, that was an empty account); the in-flight count stays.
func (sb *Sandbox) loadAccount() {
	a := sb.decodeAccount()
	sb.acct.once.Do(func() {}) // no lazy read after this one
	sb.acct.mu.Lock()
	sb.acct.a = a
	sb.acct.mu.Unlock()
}

// decodeAccount reads the accounting in sb's record's Extra (an
// unreadable Extra is logged and counts as empty). A LastActivity not
// kept there is the sandbox's start (zero before it ran; see started).
func (sb *Sandbox) decodeAccount() ExecAccount {
	sb.mu.Lock()
	extra, startedAt := sb.rec.Extra, sb.rec.StartedAt
	sb.mu.Unlock()
	a, err := DecodeExecAccount(extra)
	if err != nil && sb.log != nil {
		sb.log.Warn("sandbox record extra unreadable", "sandbox", sb.ID, "err", err)
	}
	if a.LastActivity.IsZero() {
		a.LastActivity = startedAt
	}
	return a
}

// started records the sandbox's start at (its record's StartedAt) as its
// last activity, unless it has one: the idle timeout counts from the
// start.
func (sb *Sandbox) started(at time.Time) {
	acct := sb.account()
	acct.mu.Lock()
	if acct.a.LastActivity.IsZero() {
		acct.a.LastActivity = at
	}
	acct.mu.Unlock()
}

// ExecAccount returns a copy of the sandbox's exec accounting.
func (sb *Sandbox) ExecAccount() ExecAccount {
	acct := sb.account()
	acct.mu.Lock()
	defer acct.mu.Unlock()
	return acct.a
}

// SaveExecAccount writes the sandbox's accounting into its record's Extra
// and persists the record (see setExtra). Counters change in memory;
// callers save after the change, off the path a caller waits on.
func (sb *Sandbox) SaveExecAccount() {
	sb.setExtra(sb.ExecAccount().Encode())
}

// Touch records activity now: the idle timeout counts from it.
func (sb *Sandbox) Touch() {
	acct := sb.account()
	acct.mu.Lock()
	acct.a.LastActivity = time.Now().UTC()
	acct.mu.Unlock()
}

// Busy marks the sandbox busy, so never idle, until the returned func is
// called; that ends it and records activity (Touch). File operations run
// under it; commands under BeginExec and EndExec. While an idle action
// runs (RunIfIdle) it waits for its end: the operation then finds the
// sandbox as the action left it (ErrNotRunning when paused or stopped).
func (sb *Sandbox) Busy() (done func()) {
	acct := sb.account()
	acct.mu.Lock()
	acct.waitIdleAction()
	acct.busy++
	acct.mu.Unlock()
	return sb.EndExec
}

// BeginExec begins a command on the sandbox: it keeps the sandbox busy,
// so never idle, until EndExec. While an idle action runs (RunIfIdle) it
// waits for its end, so a command never runs into the pause or stop of
// an idle sandbox. Then count is called with the sandbox's accounting,
// under its lock: the caller's bookkeeping of the command (the daemon's
// exec service counts it against MaxExecs, names it and gives it the
// sandbox's defaults); an error from count refuses the command, nothing
// begun. Errors: ErrNotRunning (count not called) when the idle action
// it waited for left the sandbox paused or stopped; count's.
func (sb *Sandbox) BeginExec(count func(a *ExecAccount) error) error {
	acct := sb.account()
	acct.mu.Lock()
	defer acct.mu.Unlock()
	if acct.waitIdleAction() && sb.State() != StateRunning {
		return sb.NotRunning()
	}
	if err := count(&acct.a); err != nil {
		return err
	}
	acct.busy++
	return nil
}

// EndExec ends a command that BeginExec began (Busy's done func is EndExec
// too) and records activity.
func (sb *Sandbox) EndExec() {
	acct := sb.account()
	acct.mu.Lock()
	acct.busy--
	acct.a.LastActivity = time.Now().UTC()
	acct.mu.Unlock()
}

// Expired says why the sandbox must be reaped at now (ExpiredTTL,
// ExpiredIdle, ExpiredPausedTTL), or "". The TTL runs in every state,
// paused too. Only a running sandbox can be idle, and not while a command
// or file operation is in flight. A sandbox paused to disk expires
// PausedTTLSeconds after its pause.
func (sb *Sandbox) Expired(now time.Time) string {
	sb.mu.Lock()
	created, state, paused := sb.rec.CreatedAt, sb.rec.State, sb.rec.Paused
	sb.mu.Unlock()
	acct := sb.account()
	acct.mu.Lock()
	lim, idle := acct.a.Limits, acct.idleLocked(now, state)
	acct.mu.Unlock()
	if lim.TTLSeconds > 0 && now.Sub(created) >= time.Duration(lim.TTLSeconds)*time.Second {
		return ExpiredTTL
	}
	if state == StatePaused && paused != nil && paused.ToDisk && lim.PausedTTLSeconds > 0 &&
		now.Sub(paused.At) >= time.Duration(lim.PausedTTLSeconds)*time.Second {
		return ExpiredPausedTTL
	}
	if idle {
		return ExpiredIdle
	}
	return ""
}
