package api

import (
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Syntax of the strings the API accepts. The server checks every request
// against them before it calls the Backend, so a Backend never sees a
// reference, name, label, pid or path outside them.
const (
	// NamePattern is the syntax of sandbox names, and of sandbox
	// references in URLs ({id}: a 12-hex-digit ID is also a valid name
	// syntactically, which is why a name may not look like an ID).
	NamePattern = `^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$`
	// IDPattern is the syntax of sandbox IDs: 12 lowercase hex digits.
	IDPattern = `^[0-9a-f]{12}$`
	// LabelKeyPattern is the syntax of label keys.
	LabelKeyPattern = `^[a-zA-Z0-9][a-zA-Z0-9_./-]{0,62}$`
	// ProcessIDPattern is the syntax of detached process ids ({pid}).
	ProcessIDPattern = `^[a-z0-9]{1,32}$`
	// SignalPattern is the syntax of KillRequest.Signal: a name such as
	// "TERM", "SIGKILL", "RTMIN+3" or a number.
	SignalPattern = `^[A-Za-z0-9+-]{0,32}$`
	// UserPattern is the syntax of ExecRequest.User: a guest account name
	// (useradd's portable names, a trailing "$" allowed) or a uid.
	UserPattern = `^[A-Za-z0-9_][A-Za-z0-9_.-]{0,30}\$?$`
)

// Limits of request values, checked by the server.
const (
	// MaxLabels is the most labels a sandbox may carry.
	MaxLabels = 64
	// MaxLabelValueBytes is the longest label value, in bytes.
	MaxLabelValueBytes = 256
	// MaxPathBytes is the longest guest path, in bytes.
	MaxPathBytes = 4096
	// MaxJSONBodyBytes is the largest JSON request body, in bytes (1 MiB);
	// bigger ones are answered 413 payload_too_large. Raw bodies (file
	// uploads, stdin) have no limit.
	MaxJSONBodyBytes = 1 << 20
)

var (
	nameRE     = regexp.MustCompile(NamePattern)
	idRE       = regexp.MustCompile(IDPattern)
	labelKeyRE = regexp.MustCompile(LabelKeyPattern)
	pidRE      = regexp.MustCompile(ProcessIDPattern)
	signalRE   = regexp.MustCompile(SignalPattern)
	userRE     = regexp.MustCompile(UserPattern)
)

// ValidRef reports whether ref is a syntactically valid sandbox reference:
// an ID (IDPattern) or a name (NamePattern).
func ValidRef(ref string) bool { return nameRE.MatchString(ref) }

// ValidID reports whether id is a sandbox ID (IDPattern).
func ValidID(id string) bool { return idRE.MatchString(id) }

// ValidName reports whether name may name a sandbox: it matches
// NamePattern and does not look like an ID (which would make references
// ambiguous).
func ValidName(name string) bool { return nameRE.MatchString(name) && !idRE.MatchString(name) }

// ValidLabelKey reports whether key matches LabelKeyPattern.
func ValidLabelKey(key string) bool { return labelKeyRE.MatchString(key) }

// Invalidf returns a 400 invalid_argument *Error with the formatted
// message: a value of the request is out of range or malformed. The
// validators here and the HTTP layer's own checks answer with it.
func Invalidf(format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeInvalidArgument, format, args...)
}

// CheckRef checks a sandbox reference from a URL or query. Errors are 400
// invalid_argument.
func CheckRef(ref string) error {
	if !ValidRef(ref) {
		return Invalidf("sandbox reference %s is neither an ID (12 lowercase hex digits) nor a name (letters, digits, '_', '.', '-'; at most 63, starting with a letter or digit)", QuoteShort(ref))
	}
	return nil
}

// CheckProcessID checks a detached process id from a URL ({pid}). Errors
// are 400 invalid_argument.
func CheckProcessID(pid string) error {
	if !pidRE.MatchString(pid) {
		return Invalidf("process id %s is malformed: use the id POST .../processes returned (1 to 32 lowercase letters and digits)", QuoteShort(pid))
	}
	return nil
}

// CleanGuestPath checks a guest path from a request and returns it
// cleaned: it must be absolute, at most MaxPathBytes long, without NUL and
// without ".." elements; "//", "/./" and a trailing "/" are cleaned away.
// Errors are 400 invalid_argument naming what, the field (e.g. "path").
func CleanGuestPath(what, p string) (string, error) {
	switch {
	case p == "":
		return "", Invalidf("%s is missing: give an absolute guest path such as /work/data.csv", what)
	case len(p) > MaxPathBytes:
		return "", Invalidf("%s is %d bytes long; the limit is %d", what, len(p), MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return "", Invalidf("%s %s contains a NUL byte", what, QuoteShort(p))
	case !strings.HasPrefix(p, "/"):
		return "", Invalidf("%s %s is relative: give an absolute guest path (starting with /)", what, QuoteShort(p))
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return "", Invalidf("%s %s contains a \"..\" element: give the absolute path without ..", what, QuoteShort(p))
		}
	}
	return path.Clean(p), nil
}

// ParseMode parses an octal permission string ("644", "0644", "01777",
// at most 07777) into an fs.FileMode with Go's setuid, setgid and sticky
// bits. Errors are 400 invalid_argument.
func ParseMode(s string) (fs.FileMode, error) {
	if s == "" || len(s) > 5 {
		return 0, Invalidf("mode %s is not an octal permission such as 0644 (0 to 07777)", QuoteShort(s))
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil || v > 0o7777 {
		return 0, Invalidf("mode %s is not an octal permission such as 0644 (0 to 07777)", QuoteShort(s))
	}
	m := fs.FileMode(v & 0o777)
	if v&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if v&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}

// FormatMode formats the permission bits of m (with Go's setuid, setgid
// and sticky bits; unix-style 0o7000 bits, unused by fs.FileMode, count
// too) as an octal string of at least four digits, e.g. "0644", "1777":
// the format of FileInfo.Mode and of the mode query parameter.
func FormatMode(m fs.FileMode) string {
	v := uint32(m.Perm()) | uint32(m&0o7000)
	if m&fs.ModeSetuid != 0 {
		v |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		v |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}

// Validate checks a create request (the server does before it calls the
// Backend). Errors are 400 invalid_argument naming the field.
func (req *CreateSandboxRequest) Validate() error {
	if req.Image != "" && req.Template != "" {
		return Invalidf("give image or template, not both: template %s already names an image", QuoteShort(req.Template))
	}
	if req.Template != "" && !ValidTemplateName(req.Template) {
		return Invalidf("template %s is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (GET /v1/templates lists them)", QuoteShort(req.Template))
	}
	if req.Template == "" && strings.TrimSpace(req.Image) == "" {
		return Invalidf("image is missing: give the image directory on the daemon's host (it holds manifest.toml), or a template (GET /v1/templates lists them)")
	}
	if strings.IndexByte(req.Image, 0) >= 0 {
		return Invalidf("image contains a NUL byte")
	}
	if req.Name != "" {
		if !nameRE.MatchString(req.Name) {
			return Invalidf("name %s is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", QuoteShort(req.Name))
		}
		if idRE.MatchString(req.Name) {
			return Invalidf("name %q looks like a sandbox ID (12 hex digits): choose a name that does not, so references stay unambiguous", req.Name)
		}
	}
	if err := checkNonNegative(map[string]int64{
		"vcpus": int64(req.VCPUs), "memory_mib": int64(req.MemoryMiB), "boot_timeout_ms": req.BootTimeoutMs,
		"limits.ttl_seconds": req.Limits.TTLSeconds, "limits.idle_timeout_seconds": req.Limits.IdleTimeoutSeconds,
		"limits.exec_timeout_ms": req.Limits.ExecTimeoutMs, "limits.max_execs": int64(req.Limits.MaxExecs),
		"net_bps": req.NetBps, "limits.paused_ttl_seconds": req.Limits.PausedTTLSeconds,
	}); err != nil {
		return err
	}
	if !ValidIdleAction(req.Limits.IdleAction) {
		return Invalidf("limits.idle_action %s is not one of remove, stop, pause, pause-to-disk", QuoteShort(req.Limits.IdleAction))
	}
	if !ValidIdleAction(req.Limits.TTLAction) {
		return Invalidf("limits.ttl_action %s is not one of remove, stop, pause, pause-to-disk", QuoteShort(req.Limits.TTLAction))
	}
	if _, ok := PriorityRank(req.Priority); !ok {
		return Invalidf("priority %s is not one of low, normal, high", QuoteShort(req.Priority))
	}
	if len(req.Env) > MaxEnv {
		return Invalidf("env has %d entries; the limit is %d", len(req.Env), MaxEnv)
	}
	if err := CheckEnv(req.Env); err != nil {
		return err
	}
	switch req.Accel {
	case "", "auto", "kvm", "tcg":
	default:
		return Invalidf("accel %s is not one of auto, kvm, tcg", QuoteShort(req.Accel))
	}
	return CheckLabels(req.Labels)
}

// checkNonNegative reports the first (by name) negative field.
func checkNonNegative(fields map[string]int64) error {
	var bad []string
	for name, v := range fields {
		if v < 0 {
			bad = append(bad, fmt.Sprintf("%s is %d", name, v))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	return Invalidf("%s: it must not be negative (0 means the default)", strings.Join(bad, ", "))
}

// CheckLabels checks label keys and values (also of list filters). Errors
// are 400 invalid_argument.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return Invalidf("%d labels given; the limit is %d", len(labels), MaxLabels)
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !labelKeyRE.MatchString(k) {
			return Invalidf("label key %s is invalid: use 1 to 63 letters, digits, '_', '.', '/', '-', starting with a letter or digit", QuoteShort(k))
		}
		if v := labels[k]; len(v) > MaxLabelValueBytes {
			return Invalidf("label %q has a %d-byte value; the limit is %d bytes", k, len(v), MaxLabelValueBytes)
		} else if strings.IndexByte(v, 0) >= 0 {
			return Invalidf("label %q has a NUL byte in its value", k)
		}
	}
	return nil
}

// Validate checks an exec request; attached says it is for POST .../exec
// (stdin_open is for detached processes only). Errors are 400
// invalid_argument.
func (req *ExecRequest) Validate(attached bool) error {
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return Invalidf("cmd is empty: give the argv to run, e.g. [\"python3\", \"-c\", \"print(1)\"]")
	}
	for i, a := range req.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return Invalidf("cmd[%d] contains a NUL byte", i)
		}
	}
	if err := CheckEnv(req.Env); err != nil {
		return err
	}
	if req.Cwd != "" {
		if strings.IndexByte(req.Cwd, 0) >= 0 {
			return Invalidf("cwd contains a NUL byte")
		}
		if !strings.HasPrefix(req.Cwd, "/") {
			return Invalidf("cwd %s is relative: give an absolute guest directory", QuoteShort(req.Cwd))
		}
		if len(req.Cwd) > MaxPathBytes {
			return Invalidf("cwd is %d bytes long; the limit is %d", len(req.Cwd), MaxPathBytes)
		}
	}
	if req.User != "" {
		if req.UID != nil || req.GID != nil {
			return Invalidf("user %s and uid/gid both given: run as a named user or as uid[:gid], not both", QuoteShort(req.User))
		}
		if !userRE.MatchString(req.User) {
			return Invalidf("user %s is not a user name: letters, digits, '_', '.', '-' (not first), at most 32", QuoteShort(req.User))
		}
	}
	if req.TimeoutMs < 0 {
		return Invalidf("timeout_ms is %d: it must not be negative (0 means the sandbox's default)", req.TimeoutMs)
	}
	if attached && req.StdinOpen {
		return Invalidf("stdin_open is for detached processes: start the command with POST /v1/sandboxes/{id}/processes and write to its stdin endpoint")
	}
	if req.Tty != nil {
		if err := req.Tty.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// Validate checks a kill request's signal syntax. Errors are 400
// invalid_argument.
func (req *KillRequest) Validate() error {
	if !signalRE.MatchString(req.Signal) {
		return Invalidf("signal %s is not a signal name (TERM, SIGKILL, ...) or number", QuoteShort(req.Signal))
	}
	return nil
}

// Validate checks a mkdir request and cleans its path. Errors are 400
// invalid_argument.
func (req *MkdirRequest) Validate() error {
	p, err := CleanGuestPath("path", req.Path)
	if err != nil {
		return err
	}
	req.Path = p
	if req.Mode != "" {
		if _, err := ParseMode(req.Mode); err != nil {
			return err
		}
	}
	return CheckOwner("owner", req.Owner)
}

// ValidState reports whether s is a sandbox state (one of the State*
// constants; for list filters).
func ValidState(s string) bool {
	switch s {
	case StateCreating, StateRunning, StatePaused, StateStopping, StateStopped, StateFailed:
		return true
	}
	return false
}

// QuoteShort quotes s (strconv.Quote) for an error message, cut to its
// first 80 bytes followed by "... (N bytes)" when longer: a value a client
// sent, named in the message without flooding it.
func QuoteShort(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// MaxEnv is the most entries a sandbox's default environment
// (CreateSandboxRequest.Env) may hold.
const MaxEnv = 256

// CheckEnv checks "KEY=VALUE" environment entries (an exec's, or a
// sandbox's defaults): a non-empty KEY and no NUL byte. Errors are 400
// invalid_argument naming the entry.
func CheckEnv(env []string) error {
	for i, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" {
			return Invalidf("env[%d] %s is not KEY=VALUE", i, QuoteShort(e))
		}
		if strings.IndexByte(e, 0) >= 0 {
			return Invalidf("env[%d] contains a NUL byte", i)
		}
	}
	return nil
}
