package tenant

import (
	"context"
	"fmt"
	"sync"

	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// Usage is what a tenant's sandboxes hold.
type Usage struct{ Sandboxes, VCPUs, MemoryMiB int }

// add returns u + v.
func (u Usage) add(v Usage) Usage {
	return Usage{u.Sandboxes + v.Sandboxes, u.VCPUs + v.VCPUs, u.MemoryMiB + v.MemoryMiB}
}

// sub returns u - v.
func (u Usage) sub(v Usage) Usage {
	return Usage{u.Sandboxes - v.Sandboxes, u.VCPUs - v.VCPUs, u.MemoryMiB - v.MemoryMiB}
}

// QuotaStore reserves usage for a tenant against its quota; the returned release gives it back (idempotent).
//
// Reserve is atomic: of concurrent reservations that together would go
// over a quota, only those that fit succeed (never over-committed). A
// refusal wraps ErrQuotaExceeded with the numbers (Check's message and
// details). A nil t (the admin) has no quota: Reserve succeeds and its
// release does nothing. LocalStore implements it on one host; a cluster
// implements it over a shared store with compare-and-set.
type QuotaStore interface {
	Reserve(ctx context.Context, t *Tenant, u Usage) (release func(), err error)
}

// Check returns nil when asked fits t's quota besides used, else an error
// wrapping ErrQuotaExceeded whose message says the tenant, what is used,
// the limit and what was asked (e.g. "tenant a: 3 of 3 sandboxes in use;
// remove one or raise max_sandboxes"), with details resource, used, limit
// and asked. Every QuotaStore refuses with it.
func Check(t *Tenant, used, asked Usage) error {
	q := t.Quota
	for _, l := range []struct {
		resource, unit, key string
		used, asked, limit  int
	}{
		{"sandboxes", "sandboxes", "max_sandboxes", used.Sandboxes, asked.Sandboxes, q.MaxSandboxes},
		{"vcpus", "vCPUs", "max_vcpus", used.VCPUs, asked.VCPUs, q.MaxVCPUs},
		{"memory_mib", "MiB of memory", "max_memory_mib", used.MemoryMiB, asked.MemoryMiB, q.MaxMemoryMiB},
	} {
		if l.limit == 0 || l.used+l.asked <= l.limit {
			continue
		}
		var msg string
		if l.resource == "sandboxes" {
			msg = fmt.Sprintf("tenant %s: %d of %d sandboxes in use; remove one or raise max_sandboxes", t.Name, l.used, l.limit)
			if l.asked != 1 {
				msg = fmt.Sprintf("tenant %s: %d of %d sandboxes in use, %d asked; remove some or raise max_sandboxes", t.Name, l.used, l.limit, l.asked)
			}
		} else {
			msg = fmt.Sprintf("tenant %s: %d of %d %s in use, the sandbox asks %d; remove sandboxes, ask for less, or raise %s", t.Name, l.used, l.limit, l.unit, l.asked, l.key)
		}
		return errdefs.WithDetails(ErrQuotaExceeded.WithMessage(msg), map[string]any{
			"tenant": t.Name, "resource": l.resource, "used": l.used, "limit": l.limit, "asked": l.asked,
		})
	}
	return nil
}

// LocalStore is the QuotaStore of one host: usage per tenant in memory,
// set up from the sandboxes the daemon knows at start (Hold) and kept by
// Reserve and the releases. Safe for concurrent use.
type LocalStore struct {
	mu   sync.Mutex
	used map[string]Usage // by tenant name
}

var _ QuotaStore = (*LocalStore)(nil)

// NewLocalStore returns an empty LocalStore.
func NewLocalStore() *LocalStore { return &LocalStore{used: map[string]Usage{}} }

// Reserve implements QuotaStore: under the store's lock, u is added to
// t's usage if it fits t's quota (Check), else the refusal is returned.
func (s *LocalStore) Reserve(ctx context.Context, t *Tenant, u Usage) (func(), error) {
	if t == nil {
		return func() {}, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := Check(t, s.used[t.Name], u); err != nil {
		return nil, err
	}
	s.used[t.Name] = s.used[t.Name].add(u)
	return s.releaser(t.Name, u), nil
}

// Hold adds u to tenant name's usage without checking its quota (a
// sandbox that exists already, found at start; a quota lowered since may
// be exceeded, and then refuses new creates until enough are removed)
// and returns its release. A "" name (the admin) holds nothing.
func (s *LocalStore) Hold(name string, u Usage) func() {
	if name == "" {
		return func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.used[name] = s.used[name].add(u)
	return s.releaser(name, u)
}

// Used returns what tenant name's sandboxes hold.
func (s *LocalStore) Used(name string) Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[name]
}

// releaser returns the idempotent release of u held by name.
func (s *LocalStore) releaser(name string, u Usage) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			left := s.used[name].sub(u)
			if left == (Usage{}) {
				delete(s.used, name)
				return
			}
			s.used[name] = left
		})
	}
}
