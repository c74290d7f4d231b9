// Package secrets keeps a sandbox's secrets out of its guest. The guest
// gets a placeholder per secret in its default environment
// (NAME=agentbox-secret-NAME-<32 hex>, random per sandbox) and trusts the
// sandbox's own certificate authority; the host's egress proxy
// (vmctl/egress, Config.Intercept) terminates TLS to the hosts a secret
// is bound to with certificates that CA signs, and replaces the
// placeholder with the real value in the request headers it forwards over
// a real, verified TLS connection. The placeholder sent anywhere else goes
// out unchanged: it is useless there.
//
// A Set (the secrets, their placeholders and the CA with its key) lives
// in one file, mode 0600, in the sandbox's state directory (FileName),
// written before the sandbox's network starts and read by its egress
// service whenever that starts (create, a daemon restart, start after
// stop), and removed with the directory. The values are never in the
// sandbox's record, the audit log, the API's answers or the logs; only
// names, placeholders and hosts are.
//
// The CA (ECDSA P-256) is name-constrained to the bound hosts, so even
// its key could sign for nothing else; leaf certificates are made per
// SNI name on first use and cached (Issuer).
package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// FileName is the Set's file in a sandbox's state directory (mode 0600).
const FileName = "secrets.json"

// Limits of a create request's secrets.
const (
	MaxSecrets    = 32       // secrets per sandbox
	MaxHosts      = 16       // hosts per secret
	MaxValueBytes = 16 << 10 // bytes of one value
	maxNameBytes  = 128
)

// maxFileBytes bounds what Load reads: MaxSecrets values of MaxValueBytes
// with their names, hosts and the CA, with room to spare.
const maxFileBytes = 4 << 20

// PlaceholderPrefix starts every placeholder: the guest sees
// PlaceholderPrefix + NAME + "-" + 32 lowercase hex digits.
const PlaceholderPrefix = "agentbox-secret-"

// The environment the guest's commands get besides the placeholders, so
// TLS clients that do not read the system bundle trust the sandbox's CA
// too: OpenSSL (and Python's ssl, curl) and Python's requests read the
// bundle the guest agent appended the CA to; Node adds its own file.
var caEnv = []string{
	"SSL_CERT_FILE=" + agentproto.TrustCABundle,
	"REQUESTS_CA_BUNDLE=" + agentproto.TrustCABundle,
	"NODE_EXTRA_CA_CERTS=" + agentproto.TrustCAFile,
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Spec is one secret as a create request gives it.
type Spec struct {
	// Name is the environment variable the guest sees the placeholder in:
	// letters, digits and '_', not starting with a digit, at most 128
	// bytes, unique in the sandbox.
	Name string
	// Value is the real value, put into request headers on the host: 1 to
	// MaxValueBytes bytes, no control characters but tab (it goes into an
	// HTTP header).
	Value string
	// Hosts are the names the value is sent to (exact names, no
	// wildcards or ports): 1 to MaxHosts, each allowed by the sandbox's
	// allowlist.
	Hosts []string
}

// Secret is one secret of a Set.
type Secret struct {
	// Name is the environment variable of the placeholder.
	Name string `json:"name"`
	// Placeholder is what the guest sees instead of Value.
	Placeholder string `json:"placeholder"`
	// Value is the real value (only in the 0600 file and the proxy's
	// memory).
	Value string `json:"value"`
	// Hosts are the lowercase names the value is sent to.
	Hosts []string `json:"hosts"`
}

// Set is a sandbox's secrets and its certificate authority.
type Set struct {
	// Secrets are the sandbox's secrets, in the request's order.
	Secrets []Secret `json:"secrets"`
	// CACert is the CA certificate (PEM), which the guest trusts.
	CACert string `json:"ca_cert"`
	// CAKey is the CA's private key (PEM, PKCS #8); it never leaves the
	// host.
	CAKey string `json:"ca_key"`
}

// Check validates specs against the sandbox's network policy without
// making anything: names, values, hosts, and that every host is an exact
// name the allowlist allows (the proxy sees only what the allowlist sends
// through it). Errors wrap errdefs.ErrInvalidArgument and say what to
// change; they never quote a value.
func Check(specs []Spec, policy netpolicy.Policy) error {
	if len(specs) == 0 {
		return nil
	}
	bad := func(format string, args ...any) error {
		return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf(format, args...))
	}
	if len(specs) > MaxSecrets {
		return bad("%d secrets: at most %d per sandbox", len(specs), MaxSecrets)
	}
	if policy.Mode != netpolicy.ModeAllowlist {
		return bad("secrets need network mode allowlist with their hosts allowed (--network allowlist --allow HOST): mode %s does not send names through the host's proxy", policy.Mode)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		if !nameRE.MatchString(s.Name) || len(s.Name) > maxNameBytes {
			return bad("secret name %q: want an environment variable name (letters, digits, _; not starting with a digit; at most %d bytes)", s.Name, maxNameBytes)
		}
		if seen[s.Name] {
			return bad("secret %s is given twice", s.Name)
		}
		seen[s.Name] = true
		if slices.ContainsFunc(caEnv, func(kv string) bool { return strings.HasPrefix(kv, s.Name+"=") }) {
			return bad("secret name %s is taken by the sandbox's CA settings: choose another name", s.Name)
		}
		if s.Value == "" || len(s.Value) > MaxValueBytes {
			return bad("secret %s: its value has %d bytes: want 1 to %d", s.Name, len(s.Value), MaxValueBytes)
		}
		if i := strings.IndexFunc(s.Value, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
			return bad("secret %s: its value holds a control character at byte %d (a newline at the end of a file?): values go into HTTP headers", s.Name, i)
		}
		if len(s.Hosts) == 0 {
			return bad("secret %s is bound to no host: give --secret-host %s=HOST (the hosts its value is sent to)", s.Name, s.Name)
		}
		if len(s.Hosts) > MaxHosts {
			return bad("secret %s: %d hosts: at most %d", s.Name, len(s.Hosts), MaxHosts)
		}
		for _, h := range s.Hosts {
			r, err := netpolicy.ParseRule(h)
			if err != nil || r.Kind != netpolicy.RuleName || r.Port != 0 || strings.HasPrefix(r.Name, "*") {
				return bad("secret %s: host %q: want an exact host name (no wildcard, port or address), e.g. api.example.com", s.Name, h)
			}
			if !policy.AllowsName(r.Name) {
				return bad("secret %s: host %s is not in the sandbox's network allowlist: add --allow %s", s.Name, r.Name, r.Name)
			}
		}
	}
	return nil
}

// New checks specs (Check) and makes their Set: a random placeholder per
// secret and a new CA constrained to the hosts. label names the CA (e.g.
// the sandbox's ID). Errors: Check's; the system's randomness.
func New(specs []Spec, policy netpolicy.Policy, label string) (*Set, error) {
	if err := Check(specs, policy); err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, errdefs.ErrInvalidArgument.WithMessage("no secrets")
	}
	s := &Set{}
	var all []string
	for _, sp := range specs {
		var b [16]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("secrets: %w", err)
		}
		sec := Secret{Name: sp.Name, Placeholder: PlaceholderPrefix + sp.Name + "-" + hex.EncodeToString(b[:]), Value: sp.Value}
		for _, h := range sp.Hosts {
			h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
			if !slices.Contains(sec.Hosts, h) {
				sec.Hosts = append(sec.Hosts, h)
			}
			all = append(all, h)
		}
		s.Secrets = append(s.Secrets, sec)
	}
	slices.Sort(all)
	var err error
	if s.CACert, s.CAKey, err = newCA(label, slices.Compact(all)); err != nil {
		return nil, err
	}
	return s, nil
}

// Env returns the "KEY=VALUE" entries of the guest's default environment:
// NAME=PLACEHOLDER per secret, then SSL_CERT_FILE and REQUESTS_CA_BUNDLE
// (the system bundle holding the CA) and NODE_EXTRA_CA_CERTS (the CA's own
// file).
func (s *Set) Env() []string {
	var env []string
	for _, sec := range s.Secrets {
		env = append(env, sec.Name+"="+sec.Placeholder)
	}
	return append(env, caEnv...)
}

// Hosts returns every bound host, sorted, once each.
func (s *Set) Hosts() []string {
	var out []string
	for _, sec := range s.Secrets {
		out = append(out, sec.Hosts...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Save writes s to path atomically with mode 0600 (a temporary file in
// the same directory, fsynced, renamed).
func (s *Set) Save(path string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(b)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("secrets: write %s: %w", path, err)
	}
	return nil
}

// ErrNone is returned by Load when a sandbox has no secrets file.
var ErrNone = errdefs.New(errdefs.ErrNotFound, "", "secrets: the sandbox has no secrets")

// Load reads the Set Save wrote to path, opened without following a
// symlink (O_NOFOLLOW). Errors: ErrNone (wrapped) when the file does not
// exist; a path that is not a regular file of one link owned by this
// process's uid (a sandbox's QEMU user may have planted it in a directory
// it owned before issue 24: refused, never read); a file readable by
// others than its owner (it must be mode 0600 or stricter); a malformed
// file.
func Load(path string) (*Set, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, fmt.Errorf("%w: no %s", ErrNone, path)
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("secrets: %s is a symbolic link: refused", path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("secrets: %w", &os.PathError{Op: "fstat", Path: path, Err: err})
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("secrets: %s is not a regular file (mode %#o): refused", path, st.Mode)
	case st.Nlink != 1:
		return nil, fmt.Errorf("secrets: %s has %d hard links, want 1: refused", path, st.Nlink)
	case int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("secrets: %s is owned by uid %d, not the daemon's %d: refused", path, st.Uid, os.Geteuid())
	case st.Mode&0o077 != 0:
		return nil, fmt.Errorf("secrets: %s has mode %v: want 0600 (it holds secret values and a CA key)", path, os.FileMode(st.Mode&0o777))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("secrets: %s is over %d bytes: not a file Save wrote", path, maxFileBytes)
	}
	var s Set
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("secrets: %s: %w", path, err)
	}
	if len(s.Secrets) == 0 || s.CACert == "" || s.CAKey == "" {
		return nil, fmt.Errorf("secrets: %s: no secrets or no CA", path)
	}
	return &s, nil
}
