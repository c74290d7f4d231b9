package host

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/auth"
	"github.com/agentbox/agentbox/vmctl/backend/backendtest"
	"github.com/agentbox/agentbox/vmctl/e2b"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

func TestClusterTenantHooks(t *testing.T) {
	if of, with := clusterTenantHooks(nil); of != nil || with != nil {
		t.Fatal("hooks without tenants")
	}
	reg, err := tenant.NewRegistry([]*tenant.Tenant{{Name: "a"}}, [][sha256.Size]byte{sha256.Sum256([]byte("token-of-a-0123456789"))})
	if err != nil {
		t.Fatal(err)
	}
	of, with := clusterTenantHooks(reg)
	ctx, err := with(context.Background(), "a")
	if err != nil || of(ctx) != "a" {
		t.Fatalf("WithTenant(a): %v, TenantOf %q", err, of(ctx))
	}
	if _, err := with(context.Background(), "b"); api.ErrorFrom(err).Status != 403 || !strings.Contains(err.Error(), `tenant "b" is not in this node's --tenants file: give every node of the cluster the same file`) {
		t.Fatalf("WithTenant(b): %v", err)
	}
	if of(context.Background()) != "" {
		t.Fatal("TenantOf of the admin")
	}
}

// TestKeyring: the one keyring of every front holds the admin's token
// and the tenants, and the cluster token as the peers' only on a node of
// a cluster; apiAuth hands the API server a keyring NewServer accepts
// (it holds Token and Tenants; a peer secret exactly with a Router) and
// e2bAuth the E2B front the same keyring.
func TestKeyring(t *testing.T) {
	const admin, peer = "admin-token-0123456789abcdef\n", "cluster-token-0123456789abcdef"
	reg, err := tenant.NewRegistry([]*tenant.Tenant{{Name: "a"}}, [][sha256.Size]byte{sha256.Sum256([]byte("token-of-a-0123456789"))})
	if err != nil {
		t.Fatal(err)
	}
	a := Auth{Token: admin, Tenants: reg, ClusterToken: peer}
	single, node := keyring(a, false), keyring(a, true)
	if single.HasPeer() || !node.HasPeer() {
		t.Fatalf("HasPeer: single host %v, node %v; want false, true", single.HasPeer(), node.HasPeer())
	}
	for _, k := range []*auth.Keyring{single, node} {
		if id, err := k.Check(strings.TrimSpace(admin)); err != nil || id.Kind != auth.Admin {
			t.Errorf("admin token: %v, %v", id.Kind, err)
		}
		if id, err := k.Check("token-of-a-0123456789"); err != nil || id.Kind != auth.Tenant || id.Tenant.Name != "a" {
			t.Errorf("tenant token: %v, %v", id.Kind, err)
		}
	}
	if id, err := node.Check(peer); err != nil || id.Kind != auth.Peer {
		t.Errorf("node: cluster token: %v, %v", id.Kind, err)
	}
	if _, err := single.Check(peer); err == nil {
		t.Error("single host: the cluster token is accepted")
	}

	var cfg apiserver.Config
	apiAuth(a, single, &cfg)
	cfg.Backend = &backendtest.Fake{}
	if cfg.Keyring != single || cfg.Token != admin || cfg.Tenants != reg {
		t.Fatalf("apiAuth: %+v", cfg)
	}
	if _, err := apiserver.NewServer(cfg); err != nil {
		t.Errorf("NewServer of apiAuth's config: %v", err)
	}
	var ecfg e2b.Config
	if !e2bAuth(single, &ecfg) || ecfg.Keyring != single {
		t.Errorf("e2bAuth: keyring %p, want %p", ecfg.Keyring, single)
	}
	if e2bAuth(keyring(Auth{ClusterToken: peer}, true), &ecfg) {
		t.Error("e2bAuth: the peers' secret alone is an API key")
	}
}

// TestTenantHoldsClusterToken: on a node of a cluster a tenant whose
// token is the cluster token is refused at start (before anything
// listens): the keyring would take it for a peer, whose requests act for
// any caller. Without a cluster the same files are accepted.
func TestTenantHoldsClusterToken(t *testing.T) {
	const shared = "cluster-token-0123456789abcdef"
	reg, err := tenant.NewRegistry([]*tenant.Tenant{{Name: "a"}}, [][sha256.Size]byte{sha256.Sum256([]byte(shared))})
	if err != nil {
		t.Fatal(err)
	}
	a := Auth{Tenants: reg, ClusterToken: shared + "\n", ClusterTokenFile: "nodes.token"}
	err = distinctSecrets(a, true)
	want := `tenants file: tenant "a" has the cluster token (--cluster-token-file nodes.token), which the cluster's nodes authenticate each other with and whose requests may act for anyone: give the tenant its own token`
	if err == nil || err.Error() != want {
		t.Fatalf("distinctSecrets = %v\nwant %s", err, want)
	}
	if err := distinctSecrets(a, false); err != nil {
		t.Fatalf("without a cluster: %v", err)
	}
	a.ClusterToken = "another-token-0123456789abcdef"
	if err := distinctSecrets(a, true); err != nil {
		t.Fatalf("distinct tokens: %v", err)
	}
	sock := filepath.Join(testenv.ShortTempDir(t), "s")
	o := Options{StateDir: t.TempDir(), RuntimeDir: t.TempDir(), Socket: sock, Cluster: &ClusterOptions{},
		Auth: Auth{Tenants: reg, ClusterToken: shared, ClusterTokenFile: "nodes.token"}}
	if _, err := Start(t.Context(), o); err == nil || err.Error() != want {
		t.Fatalf("Start = %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatalf("the refused Start made its socket: %v", err)
	}
}
