package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Cluster is what a daemon in a cluster (serve --cluster; vmctl/cluster)
// hands to it: creates are placed through the cluster's queue instead of
// on this host, and the node list and drains are the cluster's.
type Cluster interface {
	// Place queues a create for whichever node has room, waits for it
	// and returns the sandbox that node made. Errors: those of the
	// create, 429 queue_timeout, 503 cluster_unavailable.
	Place(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error)
	// ListNodes returns the cluster's nodes by name.
	ListNodes(ctx context.Context) ([]api.Node, error)
	// DrainNode sets whether the named node pulls creates (drain true: no
	// new placements, existing sandboxes run on). Errors: 404 for an
	// unknown node.
	DrainNode(ctx context.Context, name string, drain bool) (api.Node, error)
}

// clusterSeam is the daemon's Cluster, set once before serving.
type clusterSeam struct {
	mu sync.Mutex
	c  Cluster
}

func (c *core) cluster() Cluster {
	c.cl.mu.Lock()
	defer c.cl.mu.Unlock()
	return c.cl.c
}

// SetCluster makes the daemon a node of c: from now on CreateSandbox
// places through c.Place (CreateLocal is the create on this host, what the
// cluster's puller calls), and ListNodes and DrainNode are c's. Call it
// before the API serves; nil leaves the cluster.
func (c *core) SetCluster(cl Cluster) {
	c.cl.mu.Lock()
	c.cl.c = cl
	c.cl.mu.Unlock()
}

type localCreateKey struct{}

// placed returns the cluster to place a create through: nil for a
// create on this host (CreateLocal, or no cluster).
func (c *core) placed(ctx context.Context) Cluster {
	if ctx.Value(localCreateKey{}) != nil {
		return nil
	}
	return c.cluster()
}

// CreateLocal creates a sandbox on this host, whether or not the daemon is
// in a cluster: CreateSandbox's own path (image, policy, ceilings,
// admission, audit). The cluster's puller calls it for a create it took
// from the queue.
func (s *lifecycleService) CreateLocal(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	return s.CreateSandbox(context.WithValue(ctx, localCreateKey{}, true), req)
}

// Room reports whether the daemon would admit a create of req's shape
// now: nil when it fits, else the error the create would get (429
// capacity_exceeded with the numbers, 503 while shutting down). The
// shape is the request's vCPUs and memory, or its image's defaults for
// those it leaves zero; a request whose image does not load fits (its
// create reports the image error). It commits nothing: the create's own
// admission decides in the end.
func (s *lifecycleService) Room(ctx context.Context, req api.CreateSandboxRequest) error {
	if err := s.adm.admitting(); err != nil {
		return err
	}
	vcpus, mem := req.VCPUs, req.MemoryMiB
	if vcpus <= 0 || mem <= 0 {
		dir, _, err := s.templateImage(req)
		if err != nil || !filepath.IsAbs(dir) {
			return nil
		}
		img, err := image.Load(ctx, dir, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
		if err != nil {
			return nil
		}
		vcpus, mem, _ = resources.Resolve(img, vcpus, mem, sandbox.ResourceRequest{})
	}
	r := s.mgr.Resources()
	r.VCPUs, r.MemoryMiB = vcpus, mem
	return s.adm.check(r)
}

// ListNodes implements backend.NodeBackend: the cluster's nodes; a
// tenant's list has no advertise URLs (where the nodes' APIs are is the
// operator's). Errors: 501 not_implemented outside a cluster.
func (c *core) ListNodes(ctx context.Context) ([]api.Node, error) {
	cl := c.cluster()
	if cl == nil {
		return nil, errNoCluster
	}
	nodes, err := cl.ListNodes(ctx)
	if _, ok := tenant.From(ctx); ok {
		for i := range nodes {
			nodes[i].Advertise = ""
		}
	}
	return nodes, err
}

// DrainNode implements backend.NodeBackend: the admin's only. Errors:
// 403 permission_denied (tenant.ErrNotGranted) for a tenant, 501 outside
// a cluster, 404 for an unknown node.
func (c *core) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	if t, ok := tenant.From(ctx); ok {
		verb := "undraining"
		if drain {
			verb = "draining"
		}
		return api.Node{}, tenant.ErrNotGranted.WithMessage(fmt.Sprintf("%s a node is the operator's: tenant %s may not; ask the operator", verb, t.Name))
	}
	cl := c.cluster()
	if cl == nil {
		return api.Node{}, errNoCluster
	}
	return cl.DrainNode(ctx, name, drain)
}

var errNoCluster = errdefs.ErrNotImplemented.WithMessage("this daemon is not in a cluster: start it with `agentbox serve --cluster nats://HOST:4222 --node NAME --advertise URL`")
