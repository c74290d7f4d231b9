package host

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
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
