// Package image loads and validates agentbox images: a directory holding a
// kernel, an initrd, a read-only base qcow2 disk and a manifest.toml that
// names them, gives the kernel command line, the guest agent's virtio-serial
// port name, default resources and the sha256 of every file.
//
// The same contract is produced by the test image builder (tests/image) and
// by the Nix flake, so the controller never cares how an image was made.
package image

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// ManifestName is the file name of the manifest inside an image directory.
const ManifestName = "manifest.toml"

// FormatVersion is the only manifest format this build understands.
const FormatVersion = 1

// DefaultAgentPort is the virtio-serial port name used when the manifest
// names none. It follows QEMU's reverse-DNS convention for port names
// (compare org.qemu.guest_agent.0).
const DefaultAgentPort = "org.agentbox.agent.0"

// Manifest is the parsed manifest.toml of an image.
type Manifest struct {
	// Format is the manifest format version; must equal FormatVersion.
	Format int `toml:"format"`
	// Name is a human-readable image name, e.g. "agentbox-test".
	Name string `toml:"name"`
	// Kernel, Initrd and Disk are file names relative to the image
	// directory: the kernel for direct boot, its initramfs, and the base
	// qcow2 disk that sandbox overlays use as their backing file.
	Kernel string `toml:"kernel"`
	Initrd string `toml:"initrd"`
	Disk   string `toml:"disk"`
	// Cmdline is the kernel command line, e.g. "console=ttyS0 root=/dev/vda rw".
	Cmdline string `toml:"cmdline"`
	// AgentPort is the virtio-serial port name the guest agent opens.
	AgentPort string `toml:"agent_port"`
	// KernelVersion records the kernel release the image was built with
	// (informational, e.g. "6.1.0-57-cloud-amd64").
	KernelVersion string `toml:"kernel_version"`
	// Resources are the sandbox defaults for this image.
	Resources Resources `toml:"resources"`
	// Network is the image's default network policy (a profile's
	// agentbox.guest.network.{policy,allow}); optional, absent means
	// none. A create request that names a policy replaces it.
	Network Network `toml:"network,omitempty"`
	// SHA256 maps every file name above to its lowercase hex sha256.
	SHA256 map[string]string `toml:"sha256"`
}

// Resources are an image's default sandbox resources.
type Resources struct {
	// VCPUs is the number of virtual CPUs (≥ 1).
	VCPUs int `toml:"vcpus"`
	// MemoryMiB is the guest memory in MiB (≥ 64).
	MemoryMiB int `toml:"memory_mib"`
	// DiskMiB is the default root disk size in MiB (the sandbox overlay's
	// virtual size), at least the base disk's; optional, 0 keeps the base
	// disk's size.
	DiskMiB int64 `toml:"disk_mib,omitempty"`
	// CPUQuotaPercent is the default whole-VM CPU cap in percent of one
	// host CPU; optional, 0 means none.
	CPUQuotaPercent int `toml:"cpu_quota_percent,omitempty"`
}

// Network is an image's default network policy, in the forms of
// vmctl/netpolicy: Policy is "none", "allowlist" or "open"; Allow holds
// DEST strings such as "api.example.com", "example.com:8443", "198.51.100.0/24:80"
// or "host:5432"; DNS is "strict" (netpolicy.DNSStrict) or empty.
type Network struct {
	Policy string   `toml:"policy"`
	Allow  []string `toml:"allow,omitempty"`
	DNS    string   `toml:"dns,omitempty"`
}

// policy parses n (netpolicy.Parse and WithDNS).
func (n Network) policy() (netpolicy.Policy, error) {
	p, err := netpolicy.Parse(n.Policy, n.Allow)
	if err != nil {
		return netpolicy.Policy{}, err
	}
	return p.WithDNS(n.DNS)
}

// DefaultNetwork returns the image's default network policy (mode none when
// the manifest has no [network]). The manifest was validated when it was
// parsed, so the policy parses.
func (m Manifest) DefaultNetwork() netpolicy.Policy {
	p, err := m.Network.policy()
	if err != nil {
		return netpolicy.Policy{Mode: netpolicy.ModeNone}
	}
	return p
}

var (
	hexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)
	portName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// ParseManifest decodes manifest.toml bytes and validates them. Unknown keys
// are an error (a typo must not silently fall back to a default). Errors wrap
// ErrInvalid.
func ParseManifest(data []byte) (Manifest, error) {
	var m Manifest
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&m)
	if err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest.toml: %v", ErrInvalid, err)
	}
	if undec := md.Undecoded(); len(undec) > 0 {
		keys := make([]string, 0, len(undec))
		for _, k := range undec {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		return Manifest{}, fmt.Errorf("%w: manifest.toml: unknown keys %s: remove them or check their spelling", ErrInvalid, strings.Join(keys, ", "))
	}
	if m.AgentPort == "" {
		m.AgentPort = DefaultAgentPort
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// Validate checks the manifest's fields without touching the file system.
// Errors wrap ErrInvalid and say which field to fix.
func (m Manifest) Validate() error {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if m.Format != FormatVersion {
		bad("format = %d, this agentbox reads format %d: rebuild the image with a matching builder", m.Format, FormatVersion)
	}
	files := map[string]string{"kernel": m.Kernel, "initrd": m.Initrd, "disk": m.Disk}
	for _, field := range []string{"kernel", "initrd", "disk"} {
		name := files[field]
		if err := checkFileName(name); err != nil {
			bad("%s: %v", field, err)
			continue
		}
		sum, ok := m.SHA256[name]
		switch {
		case !ok:
			bad("sha256: no entry for %q (the %s): add its sha256 under [sha256]", name, field)
		case !hexSHA256.MatchString(sum):
			bad("sha256.%q = %q: want 64 lowercase hex digits", name, sum)
		}
	}
	if strings.TrimSpace(m.Cmdline) == "" {
		bad("cmdline is empty: the kernel needs at least console= and root=")
	}
	if strings.ContainsAny(m.Cmdline, "\n\r\x00") {
		bad("cmdline contains a newline or NUL")
	}
	if !portName.MatchString(m.AgentPort) {
		bad("agent_port %q: use letters, digits, '.', '_' or '-' (at most 63)", m.AgentPort)
	}
	if m.Resources.VCPUs < 1 || m.Resources.VCPUs > 255 {
		bad("resources.vcpus = %d: want 1..255", m.Resources.VCPUs)
	}
	if m.Resources.MemoryMiB < 64 {
		bad("resources.memory_mib = %d: want at least 64", m.Resources.MemoryMiB)
	}
	if m.Resources.DiskMiB < 0 {
		bad("resources.disk_mib = %d: want a size in MiB, or leave it out for the base disk's size", m.Resources.DiskMiB)
	}
	if m.Resources.CPUQuotaPercent < 0 {
		bad("resources.cpu_quota_percent = %d: want a percentage of one host CPU, or leave it out for no cap", m.Resources.CPUQuotaPercent)
	}
	if _, err := m.Network.policy(); err != nil {
		bad("network: %v", err)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: manifest.toml: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	return nil
}

// checkFileName accepts a plain file name that stays inside the image
// directory: no separators, no "..", not empty.
func checkFileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("missing file name")
	case name != filepath.Base(name) || strings.ContainsRune(name, '/') || name == "." || name == "..":
		return fmt.Errorf("%q must be a plain file name inside the image directory", name)
	case strings.HasPrefix(name, "."):
		return fmt.Errorf("%q must not be a hidden file", name)
	}
	return nil
}
