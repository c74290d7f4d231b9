package tenant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/vmctl/api"
)

// HashToken returns the hex SHA-256 of a bearer token, surrounding white
// space (a token file's newline) removed: the token_sha256 of the tenants
// file (`agentbox tenant hash`, or `printf %s TOKEN | sha256sum`).
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return hex.EncodeToString(sum[:])
}

// Registry maps the bearer tokens tenants present to their tenants. It
// keeps only the tokens' SHA-256 digests. Safe for concurrent use; its
// contents never change.
type Registry struct {
	entries []entry
}

type entry struct {
	sum    [sha256.Size]byte
	tenant *Tenant
}

// NewRegistry returns the registry of tenants whose token digests are
// sums[i] (32 bytes each). Errors as for Parse: duplicate names or
// digests, invalid names or quotas.
func NewRegistry(tenants []*Tenant, sums [][sha256.Size]byte) (*Registry, error) {
	if len(tenants) != len(sums) {
		return nil, errors.New("tenant: one token digest per tenant")
	}
	r := &Registry{}
	names := map[string]bool{}
	digests := map[[sha256.Size]byte]string{}
	for i, t := range tenants {
		if err := checkTenant(t); err != nil {
			return nil, err
		}
		if names[t.Name] {
			return nil, fmt.Errorf("tenant %q is named twice: give each tenant its own name", t.Name)
		}
		names[t.Name] = true
		if other, ok := digests[sums[i]]; ok {
			return nil, fmt.Errorf("tenants %q and %q have the same token_sha256: give each tenant its own token", other, t.Name)
		}
		digests[sums[i]] = t.Name
		r.entries = append(r.entries, entry{sum: sums[i], tenant: t})
	}
	return r, nil
}

// Lookup returns the tenant whose token is token, comparing SHA-256
// digests in constant time against every tenant (the time taken says
// nothing about which, if any, matched).
func (r *Registry) Lookup(token string) (*Tenant, bool) {
	if r == nil || token == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(token))
	var found *Tenant
	for _, e := range r.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found = e.tenant
		}
	}
	return found, found != nil
}

// Tenants returns the registry's tenants, in the file's order.
func (r *Registry) Tenants() []*Tenant {
	if r == nil {
		return nil
	}
	out := make([]*Tenant, len(r.entries))
	for i, e := range r.entries {
		out[i] = e.tenant
	}
	return out
}

// Get returns the tenant named name.
func (r *Registry) Get(name string) (*Tenant, bool) {
	for _, t := range r.Tenants() {
		if t.Name == name {
			return t, true
		}
	}
	return nil, false
}

// file is the TOML of a tenants file.
type file struct {
	Tenant []fileTenant `toml:"tenant"`
}

type fileTenant struct {
	Name         string `toml:"name"`
	TokenSHA256  string `toml:"token_sha256"`
	MaxSandboxes int    `toml:"max_sandboxes"`
	MaxVCPUs     int    `toml:"max_vcpus"`
	MaxMemoryMiB int    `toml:"max_memory_mib"`
	MaxPriority  string `toml:"max_priority"`

	MaxSnapshots    int   `toml:"max_snapshots"`
	MaxSnapshotMiB  int64 `toml:"max_snapshot_mib"`
	MaxPortForwards int   `toml:"max_port_forwards"`
	HostPorts       []int `toml:"host_ports"`
	ShareTemplates  bool  `toml:"share_templates"`
}

// Load reads and parses the tenants file at path (Parse). Errors name the
// file.
func Load(path string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("tenants file: %w", err)
	}
	r, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("tenants file %s: %w", path, err)
	}
	return r, nil
}

// Parse parses a tenants file (TOML, docs/tenants.md):
//
//	[[tenant]]
//	name = "a"                 # NamePattern, unique
//	token_sha256 = "…"         # 64 hex digits: HashToken of the tenant's token
//	max_sandboxes = 3          # 0 or absent: no limit
//	max_vcpus = 8
//	max_memory_mib = 8192
//	max_priority = "normal"    # low | normal | high; absent: normal
//	max_snapshots = 10         # 0 or absent: no limit
//	max_snapshot_mib = 20480   # MiB of snapshot files together; 0 or absent: no limit
//	max_port_forwards = 16     # per sandbox; 0 or absent: DefaultMaxPortForwards
//	host_ports = [5432]        # host loopback ports its host:PORT rules may name; absent: none
//	share_templates = false    # clone the shared memory templates; absent: its own
//
// Errors say which tenant and what to fix: unknown keys, a missing or
// invalid name, a token_sha256 that is not 64 hex digits, duplicate names
// or digests, negative quotas, an unknown priority, no tenant at all.
func Parse(data []byte) (*Registry, error) {
	var f file
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, err
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("unknown keys %s: a [[tenant]] has name, token_sha256, max_sandboxes, max_vcpus, max_memory_mib, max_priority, max_snapshots, max_snapshot_mib, max_port_forwards, host_ports, share_templates", strings.Join(keys, ", "))
	}
	if len(f.Tenant) == 0 {
		return nil, errors.New("no [[tenant]]: list at least one tenant (see docs/tenants.md)")
	}
	tenants := make([]*Tenant, len(f.Tenant))
	sums := make([][sha256.Size]byte, len(f.Tenant))
	for i, ft := range f.Tenant {
		what := fmt.Sprintf("tenant %q", ft.Name)
		if ft.Name == "" {
			what = fmt.Sprintf("tenant #%d", i+1)
		}
		h := strings.ToLower(strings.TrimSpace(ft.TokenSHA256))
		b, err := hex.DecodeString(h)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("%s: token_sha256 %s is not 64 hex digits: put the SHA-256 of the tenant's token there (agentbox tenant hash < TOKENFILE)", what, api.QuoteShort(ft.TokenSHA256))
		}
		copy(sums[i][:], b)
		ports := slices.Clone(ft.HostPorts)
		slices.Sort(ports)
		tenants[i] = &Tenant{Name: ft.Name, Quota: Quota{
			MaxSandboxes: ft.MaxSandboxes, MaxVCPUs: ft.MaxVCPUs, MaxMemoryMiB: ft.MaxMemoryMiB, MaxPriority: ft.MaxPriority,
			MaxSnapshots: ft.MaxSnapshots, MaxSnapshotMiB: ft.MaxSnapshotMiB, MaxPortForwards: ft.MaxPortForwards,
		}, Grants: Grants{HostPorts: slices.Compact(ports), ShareTemplates: ft.ShareTemplates}}
	}
	return NewRegistry(tenants, sums)
}

// MaxHostPorts is the most host_ports one tenant may be granted.
const MaxHostPorts = 256

// checkTenant checks one tenant's name, quota and grants.
func checkTenant(t *Tenant) error {
	if t.Name == "" {
		return errors.New("a tenant has no name: give every [[tenant]] a name")
	}
	if !api.ValidName(t.Name) {
		return fmt.Errorf("tenant name %s is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (not 12 hex digits)", api.QuoteShort(t.Name))
	}
	q := t.Quota
	for _, l := range []struct {
		key string
		v   int64
	}{{"max_sandboxes", int64(q.MaxSandboxes)}, {"max_vcpus", int64(q.MaxVCPUs)}, {"max_memory_mib", int64(q.MaxMemoryMiB)},
		{"max_snapshots", int64(q.MaxSnapshots)}, {"max_snapshot_mib", q.MaxSnapshotMiB}, {"max_port_forwards", int64(q.MaxPortForwards)}} {
		if l.v < 0 {
			return fmt.Errorf("tenant %q: %s %d is negative: give a limit, or 0 (or leave it out) for none", t.Name, l.key, l.v)
		}
	}
	if _, ok := api.PriorityRank(q.MaxPriority); !ok {
		return fmt.Errorf("tenant %q: max_priority %s is not one of low, normal, high", t.Name, api.QuoteShort(q.MaxPriority))
	}
	if len(t.Grants.HostPorts) > MaxHostPorts {
		return fmt.Errorf("tenant %q: host_ports lists %d ports: at most %d", t.Name, len(t.Grants.HostPorts), MaxHostPorts)
	}
	for _, p := range t.Grants.HostPorts {
		if p < 1 || p > 65535 {
			return fmt.Errorf("tenant %q: host_ports %d is not a port 1..65535", t.Name, p)
		}
	}
	return nil
}
