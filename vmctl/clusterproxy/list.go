package clusterproxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/cluster"
)

// List implements apiserver.Router: local plus, for every other node the
// directory places sandboxes of the caller's on, that node's answer to the
// same GET /v1/sandboxes (with the caller's identity). A node that is
// unreachable, or fails to answer within ListTimeout, contributes its
// directory entries as api.StateUnknown with Reason
// api.CodeNodeUnreachable, unless the list is filtered by label or state
// (which such entries cannot be matched against). Without the directory
// (NATS down) the list is local's. Sorted oldest first, unknown entries
// last; a sandbox listed twice (a stale directory) is kept once.
func (p *Proxy) List(r *http.Request, local []api.Sandbox) ([]api.Sandbox, error) {
	ctx := r.Context()
	if forwarded(ctx) {
		return local, nil
	}
	entries, err := p.dir.List(ctx)
	if err != nil {
		p.log.Warn("cluster directory list failed: listing this node's sandboxes only", "err", err)
		return local, nil
	}
	tenant := p.tenantOf(ctx)
	self := p.nodes.Self()
	byNode := map[string][]cluster.Entry{}
	for _, e := range entries {
		if e.Node == self || (tenant != "" && e.Tenant != tenant) {
			continue
		}
		byNode[e.Node] = append(byNode[e.Node], e)
	}
	filtered := r.URL.Query().Has("label") || r.URL.Query().Has("state")
	var (
		mu     sync.Mutex
		remote []api.Sandbox
		wg     sync.WaitGroup
	)
	for node, es := range byNode {
		wg.Go(func() {
			list, err := p.listNode(ctx, r, node)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				p.log.Warn("cluster node did not list its sandboxes: reporting them unknown", "node", node, "err", err)
				if filtered {
					return
				}
				list = unknownEntries(es)
			}
			mu.Lock()
			remote = append(remote, list...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return merge(local, remote), nil
}

// listNode asks node for its sandboxes with r's query, as r's caller:
// vmctl/client's list over the proxy's transport (redirects not followed),
// with the headers of a forwarded request (setIdentity) and User-Agent
// "agentbox-cluster". Its sandboxes without a Node are node's.
func (p *Proxy) listNode(ctx context.Context, r *http.Request, node string) ([]api.Sandbox, error) {
	info, err := p.nodes.Node(ctx, node)
	if err != nil {
		return nil, err
	}
	if info.State == cluster.NodeUnreachable {
		return nil, fmt.Errorf("node %s has not been seen for %s", node, sinceText(info.LastSeen))
	}
	ctx, cancel := context.WithTimeout(ctx, p.listTO)
	defer cancel()
	// One client per call, never closed: its connections are the proxy's
	// transport's, kept for the next call and for Route.
	h := http.Header{"User-Agent": {"agentbox-cluster"}}
	p.setIdentity(r.Context(), h)
	c, err := client.NewTCP(strings.TrimSuffix(info.Advertise, "/"), client.WithHeader(h), client.WithHTTPClient(&http.Client{
		Transport:     p.tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}))
	if err != nil {
		return nil, fmt.Errorf("node %s advertises %q: %w", node, info.Advertise, err)
	}
	list, err := c.ListSandboxesQuery(ctx, r.URL.Query())
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	for i := range list {
		if list[i].Node == "" {
			list[i].Node = node
		}
	}
	return list, nil
}

// unknownEntries renders the directory entries of a node that does not
// answer.
func unknownEntries(es []cluster.Entry) []api.Sandbox {
	out := make([]api.Sandbox, len(es))
	for i, e := range es {
		out[i] = api.Sandbox{ID: e.ID, Name: e.Name, Node: e.Node, State: api.StateUnknown, Reason: api.CodeNodeUnreachable}
	}
	return out
}

// merge returns local and remote in one list, oldest first, unknown
// entries last (by node, then ID), each ID once (local's first).
func merge(local, remote []api.Sandbox) []api.Sandbox {
	out := make([]api.Sandbox, 0, len(local)+len(remote))
	seen := make(map[string]bool, cap(out))
	for _, sb := range slices.Concat(local, remote) {
		if !seen[sb.ID] {
			seen[sb.ID] = true
			out = append(out, sb)
		}
	}
	slices.SortStableFunc(out, func(a, b api.Sandbox) int {
		ua, ub := a.State == api.StateUnknown, b.State == api.StateUnknown
		switch {
		case ua != ub:
			if ua {
				return 1
			}
			return -1
		case ua:
			return strings.Compare(a.Node+"/"+a.ID, b.Node+"/"+b.ID)
		}
		return a.CreatedAt.Compare(b.CreatedAt)
	})
	return out
}
