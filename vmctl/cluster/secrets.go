package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// A create's secrets (CreateSandboxRequest.Secrets) never go into NATS:
// Place keeps them in this node's memory under a random reference and
// queues the create with their names and hosts only, naming the reference
// (hdrSecrets) and itself (hdrOrigin); the node that takes the create
// fetches them from here over the cluster's authenticated API
// (Config.FetchSecrets: clusterproxy's SecretsClient, POST
// /v1/cluster/secrets with the cluster token) and makes the sandbox with
// them. Only the node the creator last saw take the create may fetch,
// once per take; the values are dropped when Place returns (sandbox,
// error, queue timeout, caller gone), so nothing outlives the create.
// (A node that takes its own create reads them here directly.) They
// stay until Place returns rather than until the first fetch because a
// create requeued after its take (the room went meanwhile) or
// redelivered (its taker died) is taken, and fetched, again.

// withoutValues returns specs with every Value "": what the queued
// create carries. Names and hosts are no secret (the API shows them);
// a node that does not know hdrSecrets (an older agentbox) refuses the
// create (a secret without a value is invalid) instead of making the
// sandbox without its secrets.
func withoutValues(specs []api.SecretSpec) []api.SecretSpec {
	out := make([]api.SecretSpec, len(specs))
	for i, s := range specs {
		out[i] = api.SecretSpec{Name: s.Name, Hosts: slices.Clone(s.Hosts)}
	}
	return out
}

// hdrSecrets is the header of a create message whose secrets stay at
// the node it came in at (hdrOrigin): the reference to fetch them by.
const hdrSecrets = "Agentbox-Secrets"

// FetchTimeout bounds the fetch of a create's secrets from the node it
// came in at.
const FetchTimeout = 10 * time.Second

// ErrSecretsUnavailable: the node that took a create could not fetch its
// secrets from the node it came in at (that node is not up, its API does
// not answer, it no longer holds them): the create fails, 503
// node_unreachable, with the node in the details.
var ErrSecretsUnavailable = errdefs.New(errdefs.ErrUnavailable, api.CodeNodeUnreachable, "the create's secrets could not be fetched from the node it came in at")

// SecretsFetcher fetches the secrets of the queued create ref from
// origin, the node it came in at (Config.FetchSecrets). It reaches
// origin.Advertise with the cluster token and names this node as the
// taker; the answer is what origin's Node.TakeSecrets returned.
type SecretsFetcher func(ctx context.Context, origin NodeInfo, ref string) ([]api.SecretSpec, error)

// heldSecrets are the secrets of one create queued here.
type heldSecrets struct {
	specs []api.SecretSpec
	w     *waiter // the creator's side: who took the create, how often
	// fetchedTake is the take (waiter.takes) whose taker fetched them; 0
	// for none yet.
	fetchedTake int
}

// secretStore holds the secrets of the creates queued at this node, by
// reference.
type secretStore struct {
	mu   sync.Mutex
	held map[string]*heldSecrets
}

// hold keeps specs for the create w waits for and returns its reference
// and the function that drops them.
func (s *secretStore) hold(specs []api.SecretSpec, w *waiter) (ref string, drop func()) {
	var b [16]byte
	rand.Read(b[:])
	ref = hex.EncodeToString(b[:])
	s.mu.Lock()
	if s.held == nil {
		s.held = map[string]*heldSecrets{}
	}
	s.held[ref] = &heldSecrets{specs: slices.Clone(specs), w: w}
	s.mu.Unlock()
	return ref, func() {
		s.mu.Lock()
		delete(s.held, ref)
		s.mu.Unlock()
	}
}

// count returns how many creates' secrets are held.
func (s *secretStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// TakeSecrets hands the secrets of the create ref, queued at this node,
// to node, the node that took it (what the cluster's peer API answers
// another node's fetch with: clusterproxy). Errors: 404 not_found when
// no create of that reference waits here (it ended: its creator got an
// answer, timed out or went away); 403 permission_denied when node is
// not the node the creator last saw take it, or it fetched them already
// in this take.
func (n *Node) TakeSecrets(_ context.Context, ref, node string) ([]api.SecretSpec, error) {
	n.secrets.mu.Lock()
	defer n.secrets.mu.Unlock()
	h := n.secrets.held[ref]
	if h == nil {
		return nil, errdefs.ErrNotFound.WithMessage(fmt.Sprintf("no create with secrets %s waits at node %s: it ended (answered, timed out, or its caller went away)", api.QuoteShort(ref), n.cfg.Node))
	}
	h.w.mu.Lock()
	taken, taker, take := h.w.state == waitTaken, h.w.taker, h.w.takes
	h.w.mu.Unlock()
	switch {
	case !taken || taker != node:
		return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("node %s did not take create %s (its creator at node %s saw %s): only the node that took a create fetches its secrets", api.QuoteShort(node), api.QuoteShort(ref), n.cfg.Node, api.QuoteShort(taker)))
	case h.fetchedTake == take:
		return nil, errdefs.ErrPermissionDenied.WithMessage(fmt.Sprintf("node %s fetched the secrets of create %s already: once per take", api.QuoteShort(node), api.QuoteShort(ref)))
	}
	h.fetchedTake = take
	return slices.Clone(h.specs), nil
}

// fetchSecrets returns the secrets of the create ref queued at node
// origin: from this node's store when it came in here, else fetched over
// the peer API (Config.FetchSecrets) within FetchTimeout. Errors:
// ErrSecretsUnavailable, naming origin and why.
func (n *Node) fetchSecrets(ctx context.Context, origin, ref string) ([]api.SecretSpec, error) {
	fail := func(why string) error {
		return errdefs.WithDetails(ErrSecretsUnavailable.WithMessage(fmt.Sprintf(
			"the create's secrets stay at node %s, where it came in, which %s: the create is not made; retry it", origin, why)),
			map[string]any{"node": origin})
	}
	if !api.ValidName(origin) {
		origin = api.QuoteShort(origin)
		return nil, fail("is no node name")
	}
	if origin == n.cfg.Node {
		specs, err := n.TakeSecrets(ctx, ref, n.cfg.Node)
		if err != nil {
			return nil, fail(fmt.Sprintf("no longer holds them (%v)", err))
		}
		return specs, nil
	}
	if n.cfg.FetchSecrets == nil {
		return nil, fail(fmt.Sprintf("this node (%s) cannot reach: it was joined without Config.FetchSecrets", n.cfg.Node))
	}
	info, err := n.Node(ctx, origin)
	switch {
	case err != nil:
		return nil, fail(fmt.Sprintf("is not in the membership (%v)", err))
	case info.State == NodeUnreachable:
		return nil, fail("has not been seen for a while (no heartbeat within the expiry)")
	}
	fctx, cancel := context.WithTimeout(ctx, FetchTimeout)
	defer cancel()
	specs, err := n.cfg.FetchSecrets(fctx, info, ref)
	if err != nil {
		return nil, fail(fmt.Sprintf("did not hand them over at %s (%v)", info.Advertise, err))
	}
	if len(specs) == 0 {
		return nil, fail(fmt.Sprintf("answered no secrets at %s", info.Advertise))
	}
	return specs, nil
}
