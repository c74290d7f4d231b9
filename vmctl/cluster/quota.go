package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/vmctl/tenant"
)

// bucketQuota is the KV bucket of the tenants' usage: tenant name →
// quotaDoc.
const bucketQuota = "agentbox_quota"

// quotaDoc is a tenant's usage in the cluster: each node's share (what
// that node's sandboxes of the tenant, and its creates in flight, hold).
// The tenant's usage is their sum. One key per tenant, written only with
// compare-and-set on its revision, so every check sees every node's share
// and a write based on an old view is refused and retried.
type quotaDoc struct {
	Nodes map[string]tenant.Usage `json:"nodes"`
}

// QuotaStore is the cluster-wide tenant.QuotaStore (docs/tenants.md,
// docs/cluster.md): a tenant's quotas hold across the nodes under
// concurrent creates, never over-committed.
//
// Each node keeps its own share in memory (the sandboxes its daemon holds,
// Hold at start, plus its reservations) and writes it into the tenant's
// key of the KV bucket agentbox_quota with compare-and-set: Reserve reads
// the key, checks the other nodes' shares plus its own plus the request
// against the quota (tenant.Check's refusal, 429 tenant_quota with the
// numbers), and updates the key at the revision it read; a conflict
// (another node wrote meanwhile) reads again. A node's writes are
// serialised by a lock, so conflicts come only from other nodes.
//
// A node that dies keeps its share in the bucket: its sandboxes still
// count until it returns (its daemon holds what it finds at start and the
// node rewrites its share when it joins: Sync) or they are removed. A
// release that could not be written (NATS down) is written by the next
// Sync (the node runs it with every directory reconciliation). Without
// NATS, Reserve refuses with ErrUnavailable (503 cluster_unavailable).
// Safe for concurrent use.
type QuotaStore struct {
	node string

	mu    sync.Mutex
	kv    jetstream.KeyValue      // nil until the node has set up JetStream
	local map[string]tenant.Usage // this node's share, by tenant
	dirty map[string]bool         // tenants whose share in the bucket is not yet local's
}

var _ tenant.QuotaStore = (*QuotaStore)(nil)

// NewQuotaStore returns the QuotaStore of node (serve --node), to pass
// to the daemon (daemon.Config.Quotas) and to Join (Config.Quotas), which
// connects it to the bucket.
func NewQuotaStore(node string) *QuotaStore {
	return &QuotaStore{node: node, local: map[string]tenant.Usage{}, dirty: map[string]bool{}}
}

// quotaWriteTimeout bounds a release's or a sync's writes.
const quotaWriteTimeout = 10 * time.Second

// attach connects s to the bucket (Node.setup); the node's first
// reconciliation writes its share (Sync).
func (s *QuotaStore) attach(kv jetstream.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv = kv
}

// Reserve implements tenant.QuotaStore (see QuotaStore). Errors: the
// refusal of tenant.Check (wraps tenant.ErrQuotaExceeded), ErrUnavailable,
// ctx's.
func (s *QuotaStore) Reserve(ctx context.Context, t *tenant.Tenant, u tenant.Usage) (func(), error) {
	if t == nil {
		return func() {}, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		return nil, fmt.Errorf("%w: tenant quotas are cluster-wide and the node has not joined yet", ErrUnavailable)
	}
	mine := addUsage(s.local[t.Name], u)
	err := s.write(ctx, t.Name, func(others tenant.Usage) error { return tenant.Check(t, addUsage(others, s.local[t.Name]), u) }, mine)
	if err != nil {
		return nil, err
	}
	s.local[t.Name] = mine
	delete(s.dirty, t.Name)
	return s.releaser(t.Name, u), nil
}

// Hold adds u to tenant name's share without checking its quota (a
// sandbox the daemon finds at start; daemon tenancy.load) and returns its
// release; the bucket gets it with the next write or Sync. "" (the admin)
// holds nothing.
func (s *QuotaStore) Hold(name string, u tenant.Usage) func() {
	if name == "" {
		return func() {}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.local[name] = addUsage(s.local[name], u)
	s.dirty[name] = true
	return s.releaser(name, u)
}

// Used returns tenant name's usage in the cluster: every node's share in
// the bucket, this node's own from memory. Errors: ErrUnavailable.
func (s *QuotaStore) Used(ctx context.Context, name string) (tenant.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		return tenant.Usage{}, ErrUnavailable
	}
	doc, _, err := s.read(ctx, name)
	if err != nil {
		return tenant.Usage{}, err
	}
	return addUsage(s.others(doc), s.local[name]), nil
}

// Sync writes this node's share of every tenant into the bucket where it
// differs: shares of tenants it holds nothing of any more (removed while
// NATS was away, or before a restart) are dropped, releases that could not
// be written are. The node runs it when it joins and with every directory
// reconciliation.
func (s *QuotaStore) Sync(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv == nil {
		return ErrUnavailable
	}
	names := map[string]bool{}
	for n := range s.local {
		names[n] = true
	}
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return unavailable(err)
	}
	for k := range keys.Keys() {
		names[k] = true
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(names)) {
		doc, _, err := s.read(ctx, name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if doc.Nodes[s.node] == s.local[name] && !s.dirty[name] {
			continue
		}
		if err := s.write(ctx, name, nil, s.local[name]); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(s.dirty, name)
	}
	return errors.Join(errs...)
}

// read returns tenant name's document and its revision (0: no key).
func (s *QuotaStore) read(ctx context.Context, name string) (quotaDoc, uint64, error) {
	doc := quotaDoc{Nodes: map[string]tenant.Usage{}}
	e, err := s.kv.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return doc, 0, nil
	}
	if err != nil {
		return doc, 0, unavailable(err)
	}
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		return doc, 0, fmt.Errorf("quota of tenant %s in %s: %w", name, bucketQuota, err)
	}
	if doc.Nodes == nil {
		doc.Nodes = map[string]tenant.Usage{}
	}
	return doc, e.Revision(), nil
}

// others is the sum of the other nodes' shares in doc.
func (s *QuotaStore) others(doc quotaDoc) tenant.Usage {
	var sum tenant.Usage
	for n, u := range doc.Nodes {
		if n != s.node {
			sum = addUsage(sum, u)
		}
	}
	return sum
}

// write sets this node's share of tenant name to mine with
// compare-and-set, rereading on a conflict; check (nil: none) is asked
// with the other nodes' shares of each version read and ends the write
// with its error. s.mu is held.
func (s *QuotaStore) write(ctx context.Context, name string, check func(others tenant.Usage) error, mine tenant.Usage) error {
	for {
		doc, rev, err := s.read(ctx, name)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(s.others(doc)); err != nil {
				return err
			}
		}
		if mine == (tenant.Usage{}) {
			delete(doc.Nodes, s.node)
		} else {
			doc.Nodes[s.node] = mine
		}
		data, _ := json.Marshal(doc)
		if rev == 0 {
			_, err = s.kv.Create(ctx, name, data)
		} else {
			_, err = s.kv.Update(ctx, name, data, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return unavailable(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// releaser returns the idempotent release of u of tenant name's share:
// given back in memory at once, in the bucket now or (NATS away) by the
// next Sync.
func (s *QuotaStore) releaser(name string, u tenant.Usage) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			left := subUsage(s.local[name], u)
			if left == (tenant.Usage{}) {
				delete(s.local, name)
			} else {
				s.local[name] = left
			}
			s.dirty[name] = true
			if s.kv == nil {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), quotaWriteTimeout)
			defer cancel()
			if s.write(ctx, name, nil, left) == nil {
				delete(s.dirty, name)
			}
		})
	}
}

func addUsage(a, b tenant.Usage) tenant.Usage {
	return tenant.Usage{Sandboxes: a.Sandboxes + b.Sandboxes, VCPUs: a.VCPUs + b.VCPUs, MemoryMiB: a.MemoryMiB + b.MemoryMiB}
}

func subUsage(a, b tenant.Usage) tenant.Usage {
	return tenant.Usage{Sandboxes: a.Sandboxes - b.Sandboxes, VCPUs: a.VCPUs - b.VCPUs, MemoryMiB: a.MemoryMiB - b.MemoryMiB}
}
