package daemon_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
)

// fakeCluster records what the daemon hands its cluster.
type fakeCluster struct{ placed []api.CreateSandboxRequest }

func (f *fakeCluster) Place(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	f.placed = append(f.placed, req)
	return api.Sandbox{ID: "0123456789ab", Name: req.Name}, nil
}

func (f *fakeCluster) ListNodes(ctx context.Context) ([]api.Node, error) {
	return []api.Node{{Name: "h1", State: "up"}}, nil
}

func (f *fakeCluster) DrainNode(ctx context.Context, name string, drain bool) (api.Node, error) {
	return api.Node{Name: name, State: "draining"}, nil
}

// The cluster seam: Room asks admission without committing, a daemon in
// a cluster places CreateSandbox through it while CreateLocal creates
// here, and the node routes answer 501 outside a cluster.
func TestClusterSeam(t *testing.T) {
	state := t.TempDir()
	d, err := daemon.New(t.Context(), daemon.Config{Driver: noDomains{}, StateDir: state, RuntimeDir: testenv.ShortTempDir(t),
		ImageVerifyCacheDir: filepath.Join(state, "verify"), CapacityVCPUs: 2, CapacityMemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Room(ctx, api.CreateSandboxRequest{Image: "/nonexistent", VCPUs: 2, MemoryMiB: 1024}); err != nil {
		t.Fatalf("a create that fits exactly: %v", err)
	}
	ae := api.ErrorFrom(d.Room(ctx, api.CreateSandboxRequest{Image: "/nonexistent", VCPUs: 3, MemoryMiB: 512}))
	if ae == nil || ae.Status != http.StatusTooManyRequests || ae.Code != api.CodeCapacity || ae.Details["capacity_vcpus"] != 2 {
		t.Fatalf("a create above the capacity: %+v", ae)
	}
	if ae := api.ErrorFrom(d.Room(ctx, api.CreateSandboxRequest{Image: "/nonexistent"})); ae != nil {
		t.Fatalf("an image that does not load fits (its create says why): %+v", ae)
	}

	if _, err := d.ListNodes(ctx); api.ErrorFrom(err).Status != http.StatusNotImplemented || !strings.Contains(err.Error(), "agentbox serve --cluster") {
		t.Fatalf("nodes outside a cluster: %v", err)
	}
	fc := &fakeCluster{}
	d.SetCluster(fc)
	sb, err := d.CreateSandbox(ctx, api.CreateSandboxRequest{Image: "/images/x", Name: "queued"})
	if err != nil || sb.Name != "queued" || len(fc.placed) != 1 {
		t.Fatalf("create in a cluster: %+v %v, placed %d", sb, err, len(fc.placed))
	}
	_, err = d.CreateLocal(ctx, api.CreateSandboxRequest{Image: "/nonexistent"})
	if ae := api.ErrorFrom(err); ae.Code != api.CodeInvalidImage || len(fc.placed) != 1 {
		t.Fatalf("CreateLocal: %v (placed %d), want the local create's invalid_image", err, len(fc.placed))
	}
	if nodes, err := d.ListNodes(ctx); err != nil || len(nodes) != 1 {
		t.Fatalf("nodes: %+v %v", nodes, err)
	}
	if n, err := d.DrainNode(ctx, "h1", true); err != nil || n.State != "draining" {
		t.Fatalf("drain: %+v %v", n, err)
	}
	d.SetCluster(nil)
	if err := d.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ae := api.ErrorFrom(d.Room(ctx, api.CreateSandboxRequest{VCPUs: 1, MemoryMiB: 1})); ae == nil || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("Room while shutting down: %+v", ae)
	}
}
