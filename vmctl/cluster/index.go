package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/vmctl/api"
)

var (
	_ Directory = (*Node)(nil)
	_ Nodes     = (*Node)(nil)
)

// entryRecord is a sandbox's value in the directory bucket (key: its ID).
type entryRecord struct {
	ID      string    `json:"id"`
	Node    string    `json:"node"`
	Name    string    `json:"name,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Created time.Time `json:"created"`
}

// A name's claim in the names bucket is the sandbox ID once the sandbox
// exists, and pendingPrefix + the claim's deadline (RFC 3339) + " " + a
// token while its create is queued or booting. A pending claim past its
// deadline, or a claim for an ID the directory does not hold, is stale
// and may be taken over (compare-and-set on its revision).
const pendingPrefix = "pending "

// claimGrace is how long past its queue deadline a pending claim holds:
// longer than any create's boot (the boot timeout is at most minutes),
// plus requeues.
const claimGrace = 15 * time.Minute

// nameKey is a sandbox name as a KV key: letters, digits and '-' as they
// are, every other byte as '_' and two hex digits ('.' would split
// tokens, and ".." is no valid key).
func nameKey(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02X", c)
	}
	return b.String()
}

// validID reports whether s has the sandbox ID syntax (12 lowercase hex
// digits), a valid key of the directory bucket.
func validID(s string) bool {
	if len(s) != 12 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			return false
		}
	}
	return true
}

// Lookup implements Directory: the entry of a sandbox ID or a name.
// Errors: ErrSandboxNotFound, ErrUnavailable.
func (n *Node) Lookup(ctx context.Context, ref string) (Entry, error) {
	h, err := n.handles()
	if err != nil {
		return Entry{}, err
	}
	if validID(ref) {
		e, err := n.entry(ctx, h, ref)
		if err == nil || !errors.Is(err, ErrSandboxNotFound) {
			return e, err
		}
	}
	if api.ValidName(ref) {
		kv, err := h.names.Get(ctx, nameKey(ref))
		if err == nil && !strings.HasPrefix(string(kv.Value()), pendingPrefix) {
			return n.entry(ctx, h, string(kv.Value()))
		}
		// A miss or a pending claim may be a lagging replica's (a direct
		// get): the create may have bound its name since
		// (TestQueueWaitsForRoom saw a placed create's name still pending).
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			v, ok, lerr := n.leaderGet(ctx, bucketNames, nameKey(ref))
			if lerr != nil {
				return Entry{}, unavailable(lerr)
			}
			if ok && !strings.HasPrefix(string(v), pendingPrefix) {
				return n.entry(ctx, h, string(v))
			}
		} else if err != nil {
			return Entry{}, unavailable(err)
		}
	}
	return Entry{}, ErrSandboxNotFound.WithMessage(fmt.Sprintf("sandbox %q not found in the cluster", ref))
}

// entry reads sandbox id's directory entry; a miss of the (direct, maybe
// lagging) KV read is confirmed by the stream's leader (leaderGet) before
// it is ErrSandboxNotFound.
func (n *Node) entry(ctx context.Context, h handles, id string) (Entry, error) {
	var value []byte
	kv, err := h.sbs.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		v, ok, lerr := n.leaderGet(ctx, bucketSandboxes, id)
		if lerr != nil {
			return Entry{}, unavailable(lerr)
		}
		if !ok {
			return Entry{}, ErrSandboxNotFound.WithMessage(fmt.Sprintf("sandbox %q not found in the cluster", id))
		}
		value = v
	case err != nil:
		return Entry{}, unavailable(err)
	default:
		value = kv.Value()
	}
	var r entryRecord
	if err := json.Unmarshal(value, &r); err != nil {
		return Entry{}, fmt.Errorf("directory entry %s: %w", id, err)
	}
	return Entry{ID: r.ID, Name: r.Name, Node: r.Node, Tenant: r.Tenant}, nil
}

// List implements Directory: every entry. Errors: ErrUnavailable.
func (n *Node) List(ctx context.Context) ([]Entry, error) {
	recs, err := n.entries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(recs))
	for _, r := range recs {
		out = append(out, Entry{ID: r.ID, Name: r.Name, Node: r.Node, Tenant: r.Tenant})
	}
	return out, nil
}

type revRecord struct {
	entryRecord
	rev uint64
}

func (n *Node) entries(ctx context.Context) ([]revRecord, error) {
	h, err := n.handles()
	if err != nil {
		return nil, err
	}
	kvs, err := all(ctx, h.sbs)
	if err != nil {
		return nil, err
	}
	out := make([]revRecord, 0, len(kvs))
	for _, kv := range kvs {
		var r entryRecord
		if json.Unmarshal(kv.Value(), &r) == nil {
			out = append(out, revRecord{r, kv.Revision()})
		}
	}
	return out, nil
}

// claim is a pending name claim made by Place.
type claim struct {
	key string
	rev uint64
}

// claimName claims name for a create that will be decided by deadline.
// Errors: ErrNameTaken (a sandbox of the cluster has it, or another
// create claimed it), ErrUnavailable.
func (n *Node) claimName(ctx context.Context, name string, deadline time.Time, token string) (claim, error) {
	h, err := n.handles()
	if err != nil {
		return claim{}, err
	}
	key := nameKey(name)
	val := []byte(pendingPrefix + deadline.UTC().Format(time.RFC3339Nano) + " " + token)
	for range 3 {
		rev, err := h.names.Create(ctx, key, val)
		if err == nil {
			return claim{key, rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return claim{}, unavailable(err)
		}
		cur, err := h.names.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return claim{}, unavailable(err)
		}
		if !n.staleClaim(ctx, h, string(cur.Value())) {
			return claim{}, ErrNameTaken.WithMessage(fmt.Sprintf("sandbox name %q is taken in the cluster: choose another name, or remove that sandbox first", name))
		}
		rev, err = h.names.Update(ctx, key, val, cur.Revision())
		if err == nil {
			return claim{key, rev}, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, jetstream.ErrKeyExists) {
			return claim{}, unavailable(err)
		}
	}
	return claim{}, ErrNameTaken.WithMessage(fmt.Sprintf("sandbox name %q is being claimed by another create: choose another name", name))
}

// staleClaim reports whether a claim's value no longer holds the name: a
// pending claim past its queue deadline by more than claimGrace (its
// create may have been taken late and still be booting; only a creator
// that died leaves one this old), or an ID the directory does not hold.
func (n *Node) staleClaim(ctx context.Context, h handles, v string) bool {
	if rest, ok := strings.CutPrefix(v, pendingPrefix); ok {
		ts, _, _ := strings.Cut(rest, " ")
		deadline, err := time.Parse(time.RFC3339Nano, ts)
		return err == nil && time.Since(deadline) > claimGrace
	}
	_, err := n.entry(ctx, h, v)
	return errors.Is(err, ErrSandboxNotFound)
}

// bindName turns a pending claim into the sandbox's ID.
func (n *Node) bindName(ctx context.Context, c claim, id string) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	_, err = h.names.Update(ctx, c.key, []byte(id), c.rev)
	return unavailable(err)
}

// releaseClaim deletes a pending claim if it is still the one made.
func (n *Node) releaseClaim(ctx context.Context, c claim) {
	h, err := n.handles()
	if err != nil {
		return
	}
	if err := h.names.Delete(ctx, c.key, jetstream.LastRevision(c.rev)); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		n.log.Debug("release name claim", "key", c.key, "err", err)
	}
}

// putEntry writes a sandbox of this node into the directory (over what
// was there) and claims its name for its ID unless the name is claimed
// by a live create or sandbox (a pending claim of Place is bound by Place).
func (n *Node) putEntry(ctx context.Context, sb api.Sandbox, tenant string) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	data, _ := json.Marshal(entryRecord{ID: sb.ID, Node: n.cfg.Node, Name: sb.Name, Tenant: tenant, Created: sb.CreatedAt})
	if _, err := h.sbs.Put(ctx, sb.ID, data); err != nil {
		return unavailable(err)
	}
	return n.ensureName(ctx, h, sb.Name, sb.ID)
}

// addEntry writes a sandbox of this node into the directory unless it is
// there: what the daemon's events and reconciliation do (the puller's
// putEntry carries the tenant and is not overwritten).
func (n *Node) addEntry(ctx context.Context, sb api.Sandbox) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	data, _ := json.Marshal(entryRecord{ID: sb.ID, Node: n.cfg.Node, Name: sb.Name, Tenant: sb.Tenant, Created: sb.CreatedAt})
	if _, err := h.sbs.Create(ctx, sb.ID, data); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return unavailable(err)
	}
	return n.ensureName(ctx, h, sb.Name, sb.ID)
}

// ensureName claims name for id when nobody holds it (a fork's or
// restore's name, or one lost while NATS was away); a pending claim is
// left to its create.
func (n *Node) ensureName(ctx context.Context, h handles, name, id string) error {
	if name == "" {
		return nil
	}
	key := nameKey(name)
	_, err := h.names.Create(ctx, key, []byte(id))
	if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
		return unavailable(err)
	}
	cur, err := h.names.Get(ctx, key)
	if err != nil {
		return unavailable(err)
	}
	v := string(cur.Value())
	if v == id || strings.HasPrefix(v, pendingPrefix) {
		return nil
	}
	if n.staleClaim(ctx, h, v) {
		_, err := h.names.Update(ctx, key, []byte(id), cur.Revision())
		return unavailable(err)
	}
	n.log.Warn("sandbox name is held by another sandbox of the cluster", "sandbox", id, "name", name, "holder", v)
	return nil
}

// removeEntry deletes a sandbox's entry if it points to this node, and
// its name's claim if that is the sandbox's.
func (n *Node) removeEntry(ctx context.Context, id, name string) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	kv, err := h.sbs.Get(ctx, id)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return unavailable(err)
	default:
		var r entryRecord
		if json.Unmarshal(kv.Value(), &r) == nil && r.Node != n.cfg.Node {
			return nil // another node's now
		}
		if name == "" {
			name = r.Name
		}
		if err := h.sbs.Delete(ctx, id, jetstream.LastRevision(kv.Revision())); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return unavailable(err)
		}
	}
	if name == "" {
		return nil
	}
	key := nameKey(name)
	cur, err := h.names.Get(ctx, key)
	if err != nil || string(cur.Value()) != id {
		return nil
	}
	if err := h.names.Delete(ctx, key, jetstream.LastRevision(cur.Revision())); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return unavailable(err)
	}
	return nil
}

// Reconcile makes the directory agree with this node's sandboxes: an
// entry for each (added where missing, names claimed), none pointing here
// for a sandbox the node no longer has. The node runs it when it joins,
// when NATS comes back, when it missed events, and every minute.
func (n *Node) Reconcile(ctx context.Context) error {
	local, err := n.cfg.Local.ListSandboxes(ctx, nil, "")
	if err != nil {
		return err
	}
	recs, err := n.entries(ctx)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, sb := range local {
		have[sb.ID] = true
	}
	mine := map[string]bool{}
	var errs []error
	for _, r := range recs {
		if r.Node != n.cfg.Node {
			continue
		}
		mine[r.ID] = true
		if !have[r.ID] {
			errs = append(errs, n.removeEntry(ctx, r.ID, r.Name))
		}
	}
	h, err := n.handles()
	if err != nil {
		return err
	}
	for _, sb := range local {
		if !mine[sb.ID] {
			data, _ := json.Marshal(entryRecord{ID: sb.ID, Node: n.cfg.Node, Name: sb.Name, Tenant: sb.Tenant, Created: sb.CreatedAt})
			if _, err := h.sbs.Put(ctx, sb.ID, data); err != nil {
				errs = append(errs, unavailable(err))
				continue
			}
		}
		errs = append(errs, n.ensureName(ctx, h, sb.Name, sb.ID))
	}
	return errors.Join(errs...)
}

// followLocal keeps the directory in step with the daemon: entries on
// its created and removed events, a reconciliation when it starts, when
// asked (NATS back), when the event stream ended (events may be lost) and
// every minute.
func (n *Node) followLocal(ctx context.Context) {
	events := make(chan api.Event, 256)
	go func() {
		for ctx.Err() == nil {
			err := n.cfg.Local.Events(ctx, func(ev api.Event) error {
				select {
				case events <- ev:
				case <-ctx.Done():
				}
				return nil
			})
			if ctx.Err() != nil {
				return
			}
			n.log.Debug("daemon event stream ended: reconciling the directory", "err", err)
			signal(n.sync)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	signal(n.sync)
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.sync:
			if err := n.Reconcile(ctx); err != nil && ctx.Err() == nil {
				n.log.Info("directory reconciliation incomplete (retried every minute and when NATS is back)", "err", err)
			}
			if q := n.cfg.Quotas; q != nil {
				if err := q.Sync(ctx); err != nil && ctx.Err() == nil {
					n.log.Info("tenant quota share not written (retried every minute and when NATS is back)", "err", err)
				}
			}
		case <-t.C:
			signal(n.sync)
		case ev := <-events:
			var err error
			switch ev.Type {
			case api.EventSandboxCreated:
				err = n.addEntry(ctx, api.Sandbox{ID: ev.Sandbox, Name: ev.Name, Tenant: ev.Tenant, CreatedAt: ev.Time})
			case api.EventSandboxRemoved:
				err = n.removeEntry(ctx, ev.Sandbox, ev.Name)
				signal(n.wake) // room for a queued create
				signal(n.beat)
			case api.EventSandboxState:
				signal(n.wake) // a stop frees room too
			}
			if err != nil {
				n.log.Debug("directory update (reconciled later)", "sandbox", ev.Sandbox, "type", ev.Type, "err", err)
			}
		}
	}
}
