package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/vmctl/api"
)

// nodeRecord is a node's entry in the membership bucket (key: its name),
// written by its heartbeat; Draining is also written by a drain from any
// node (compare-and-set on the entry's revision).
type nodeRecord struct {
	Name      string       `json:"name"`
	Advertise string       `json:"advertise"`
	Draining  bool         `json:"draining,omitempty"`
	Breaker   string       `json:"breaker,omitempty"`      // the last create error while the breaker is open
	Until     time.Time    `json:"breaker_until,omitzero"` // when the breaker closes again
	Capacity  api.Capacity `json:"capacity"`               // committed and total, at the heartbeat
	Sandboxes int          `json:"sandboxes"`              // every state
	Heartbeat time.Time    `json:"heartbeat"`              // the node's clock
	Version   string       `json:"version"`
}

// state derives the node's state as readers see it at now: unreachable
// past the expiry, then draining, then breaker-open, else up; and why.
func (r nodeRecord) state(now time.Time, expiry time.Duration) (state, reason string) {
	switch {
	case now.Sub(r.Heartbeat) > expiry:
		return NodeUnreachable, fmt.Sprintf("no heartbeat for %s", now.Sub(r.Heartbeat).Round(time.Second))
	case r.Draining:
		return NodeDraining, "drained: pulls no creates (agentbox node undrain " + r.Name + " to resume)"
	case r.Breaker != "" && now.Before(r.Until):
		return NodeBreakerOpen, fmt.Sprintf("creates failed repeatedly, pulling none until %s: %s", r.Until.UTC().Format(time.RFC3339), r.Breaker)
	}
	return NodeUp, ""
}

func (r nodeRecord) api(now time.Time, expiry time.Duration) api.Node {
	state, reason := r.state(now, expiry)
	return api.Node{
		Name: r.Name, Advertise: r.Advertise, State: state, Reason: reason,
		Capacity: r.Capacity, Sandboxes: r.Sandboxes, LastSeen: r.Heartbeat, Version: r.Version,
	}
}

// heartbeat writes the node's entry every Config.Heartbeat (and at once
// when the breaker changes or NATS comes back) until ctx ends.
func (n *Node) heartbeat(ctx context.Context) {
	t := time.NewTicker(n.cfg.Heartbeat)
	defer t.Stop()
	for {
		if err := n.beatOnce(ctx); err != nil && ctx.Err() == nil {
			n.log.Debug("heartbeat", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.beat:
		}
	}
}

// beatOnce writes the entry: compare-and-set on its revision, keeping the
// Draining flag others may have set.
func (n *Node) beatOnce(ctx context.Context) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	info, err := n.cfg.Local.Info(ctx)
	if err != nil {
		return err
	}
	count := 0
	for _, c := range info.Sandboxes {
		count += c
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Heartbeat)
	defer cancel()
	for range 3 {
		rec, rev, err := n.getNode(ctx, h, n.cfg.Node)
		if err != nil && !errors.Is(err, ErrNodeNotFound) {
			return err
		}
		n.draining.Store(rec.Draining)
		rec.Name, rec.Advertise, rec.Version = n.cfg.Node, n.cfg.Advertise, n.cfg.Version
		rec.Capacity, rec.Sandboxes, rec.Heartbeat = info.Capacity, count, time.Now().UTC()
		rec.Breaker, rec.Until = n.brk.status()
		data, _ := json.Marshal(rec)
		if rev == 0 {
			_, err = h.nodes.Create(ctx, n.cfg.Node, data)
		} else {
			_, err = h.nodes.Update(ctx, n.cfg.Node, data, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // a drain wrote it meanwhile
		}
		return unavailable(err)
	}
	return fmt.Errorf("heartbeat: the entry kept changing")
}

// getNode reads a node's entry and its revision; ErrNodeNotFound (and
// revision 0) if it has none.
func (n *Node) getNode(ctx context.Context, h handles, name string) (nodeRecord, uint64, error) {
	e, err := h.nodes.Get(ctx, name)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nodeRecord{}, 0, ErrNodeNotFound.WithMessage(fmt.Sprintf("node %q is not in the cluster (agentbox nodes lists them)", name))
	}
	if err != nil {
		return nodeRecord{}, 0, unavailable(err)
	}
	var rec nodeRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nodeRecord{}, 0, fmt.Errorf("node %q: bad entry: %w", name, err)
	}
	return rec, e.Revision(), nil
}

// watchSelf follows the node's own entry so that a drain from another
// node stops the puller at once (the heartbeat reads it too, every 2 s).
func (n *Node) watchSelf(ctx context.Context) {
	for ctx.Err() == nil {
		if err := n.watchSelfOnce(ctx); err != nil && ctx.Err() == nil {
			n.log.Debug("watch own entry", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (n *Node) watchSelfOnce(ctx context.Context) error {
	h, err := n.handles()
	if err != nil {
		return err
	}
	w, err := h.nodes.Watch(ctx, n.cfg.Node, jetstream.UpdatesOnly())
	if err != nil {
		return err
	}
	defer w.Stop() //nolint:errcheck // best effort
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher ended")
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var rec nodeRecord
			if json.Unmarshal(e.Value(), &rec) == nil {
				if was := n.draining.Swap(rec.Draining); was && !rec.Draining {
					signal(n.wake)
				}
			}
		}
	}
}

// Node implements Nodes: the named node's entry with its derived state.
// Errors: ErrNodeNotFound, ErrUnavailable.
func (n *Node) Node(ctx context.Context, name string) (NodeInfo, error) {
	h, err := n.handles()
	if err != nil {
		return NodeInfo{}, err
	}
	rec, _, err := n.getNode(ctx, h, name)
	if err != nil {
		return NodeInfo{}, err
	}
	state, _ := rec.state(time.Now(), n.cfg.Expiry)
	return NodeInfo{Name: rec.Name, Advertise: rec.Advertise, State: state, LastSeen: rec.Heartbeat}, nil
}

// ListNodes implements daemon.Cluster: every node in the membership
// bucket, by name. Errors: ErrUnavailable.
func (n *Node) ListNodes(ctx context.Context) ([]api.Node, error) {
	h, err := n.handles()
	if err != nil {
		return nil, err
	}
	entries, err := all(ctx, h.nodes)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	out := []api.Node{}
	for _, e := range entries {
		var rec nodeRecord
		if json.Unmarshal(e.Value(), &rec) != nil {
			continue
		}
		out = append(out, rec.api(now, n.cfg.Expiry))
	}
	slices.SortFunc(out, func(a, b api.Node) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// DrainNode implements daemon.Cluster: it sets the named node's Draining
// flag (compare-and-set, so a heartbeat in between is kept). A draining
// node pulls no creates; its sandboxes run on. Errors: ErrNodeNotFound,
// ErrUnavailable.
func (n *Node) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	h, err := n.handles()
	if err != nil {
		return api.Node{}, err
	}
	if name == n.cfg.Node {
		n.draining.Store(drain) // at once, whatever NATS says next
		if !drain {
			signal(n.wake)
		}
	}
	for range 5 {
		rec, rev, err := n.getNode(ctx, h, name)
		if err != nil {
			return api.Node{}, err
		}
		rec.Draining = drain
		data, _ := json.Marshal(rec)
		_, err = h.nodes.Update(ctx, name, data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		if err != nil {
			return api.Node{}, unavailable(err)
		}
		n.log.Info("node drain", "target", name, "drain", drain)
		return rec.api(time.Now(), n.cfg.Expiry), nil
	}
	return api.Node{}, fmt.Errorf("drain %s: its entry kept changing: %w", name, ErrUnavailable)
}

// all returns a bucket's current entries (deletes left out) through one
// watcher: one request, not one per key.
func all(ctx context.Context, kv jetstream.KeyValue) ([]jetstream.KeyValueEntry, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, unavailable(err)
	}
	defer w.Stop() //nolint:errcheck // best effort
	var out []jetstream.KeyValueEntry
	for {
		select {
		case <-ctx.Done():
			return nil, unavailable(ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, ErrUnavailable
			}
			if e == nil {
				return out, nil
			}
			out = append(out, e)
		}
	}
}
