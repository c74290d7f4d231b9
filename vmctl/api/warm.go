package api

import (
	"regexp"
	"time"
)

// WarmTemplate is the API's view of one warm template (GET /v1/warm): the
// saved "ready" state of one image and machine shape that `create --warm`
// starts sandboxes from. The daemon keeps at most its --warm-templates of
// them and removes the least recently used when it builds another.
type WarmTemplate struct {
	// Key is 24 lowercase hex digits: a hash of the image digest and the
	// shape (domain type, vCPUs, memory, disk and other host-side limits,
	// devices).
	Key string `json:"key"`
	// Image is the image it was booted from.
	Image ImageRef `json:"image"`
	// DomainType is libvirt's domain type (kvm, or qemu for TCG).
	DomainType string `json:"domain_type"`
	// VCPUs, MemoryMiB (MiB) and DiskMiB (the root disk's size, MiB; 0
	// when unknown) are its machine shape; Network says whether it has a
	// network device (sandboxes with a network policy other than none).
	VCPUs     int   `json:"vcpus"`
	MemoryMiB int   `json:"memory_mib"`
	DiskMiB   int64 `json:"disk_mib,omitempty"`
	Network   bool  `json:"network"`
	// SizeBytes is what it takes on the host's disk, in bytes.
	SizeBytes int64 `json:"size_bytes"`
	// CreatedAt is when it was built; BuildMs how long that took (a cold
	// boot and a save), in ms; LastUsedAt when a warm create last started
	// from it.
	CreatedAt  time.Time `json:"created_at"`
	BuildMs    int64     `json:"build_ms"`
	LastUsedAt time.Time `json:"last_used_at"`
	// Pooled is how many paused, pre-restored sandboxes its warm pool
	// holds now (serve --warm-pool). They are not sandboxes yet: not
	// listed by GET /v1/sandboxes and not counted by admission control,
	// but each holds its guest memory on the host.
	Pooled int `json:"pooled"`
}

// WarmTemplateList is the body of GET /v1/warm.
type WarmTemplateList struct {
	// Templates are ordered most recently used first.
	Templates []WarmTemplate `json:"templates"`
}

var warmKeyRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

// CheckWarmKey checks a warm template key from a URL ({key}): 24
// lowercase hex digits. Errors are 400 invalid_argument.
func CheckWarmKey(key string) error {
	if !warmKeyRE.MatchString(key) {
		return Invalidf("warm template key %s is not 24 lowercase hex digits: `agentbox warm ls` lists the keys", QuoteShort(key))
	}
	return nil
}
