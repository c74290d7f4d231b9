package api

import (
	"context"
	"net/http"
	"net/url"
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

// WarmBackend is the part of a Backend that manages warm templates; a
// Backend without it answers the warm routes 501 not_implemented.
type WarmBackend interface {
	// ListWarm lists the warm templates, most recently used first.
	ListWarm(ctx context.Context) ([]WarmTemplate, error)
	// DeleteWarm removes the template with key (syntax-checked) and its
	// pool's paused sandboxes; the next warm create of its shape builds
	// it again. Errors: 404 not_found.
	DeleteWarm(ctx context.Context, key string) error
}

var warmKeyRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

func (s *Server) warm() (WarmBackend, error) {
	if wb, ok := s.backend.(WarmBackend); ok {
		return wb, nil
	}
	return nil, Errorf(http.StatusNotImplemented, CodeNotImplemented, "this daemon does not support warm templates")
}

func (s *Server) listWarm(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.warm()
	if err != nil {
		return err
	}
	list, err := be.ListWarm(r.Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []WarmTemplate{}
	}
	return writeJSON(w, http.StatusOK, WarmTemplateList{Templates: list})
}

func (s *Server) deleteWarm(w http.ResponseWriter, r *http.Request, _ url.Values) error {
	be, err := s.warm()
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	if !warmKeyRE.MatchString(key) {
		return invalid("warm template key %s is not 24 lowercase hex digits: `agentbox warm ls` lists the keys", quoteShort(key))
	}
	if err := be.DeleteWarm(r.Context(), key); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
