package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// quotaStores returns one QuotaStore per NATS server of nc (node n0, n1,
// …), each on its own connection to its server, on one R3 bucket.
func quotaStores(t *testing.T, nc *natsCluster) []*QuotaStore {
	t.Helper()
	var stores []*QuotaStore
	for i, u := range nc.urls() {
		conn, err := nats.Connect(u, nats.Token(testNATSToken))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(conn.Close)
		js, err := jetstream.New(conn)
		if err != nil {
			t.Fatal(err)
		}
		var kv jetstream.KeyValue
		testenv.WaitFor(t, 60*time.Second, "the quota bucket", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketQuota, Replicas: 3, History: 1})
			if err != nil {
				t.Logf("quota bucket on %s: %v", u, err)
			}
			return err == nil
		})
		s := NewQuotaStore(fmt.Sprintf("n%d", i))
		s.attach(kv)
		stores = append(stores, s)
	}
	return stores
}

// TestQuotaStoreRace: 60 creates on three nodes race for a quota of 5
// sandboxes: exactly 5 pass, the others get tenant.Check's refusal with the
// numbers, and the usage is 0 after the releases (twice each: idempotent).
func TestQuotaStoreRace(t *testing.T) {
	nc := startNATS(t, 3)
	stores := quotaStores(t, nc)
	ten := &tenant.Tenant{Name: "a", Quota: tenant.Quota{MaxSandboxes: 5}}
	var (
		ok       atomic.Int32
		mu       sync.Mutex
		releases []func()
		refusals []error
		wg       sync.WaitGroup
	)
	start := make(chan struct{})
	for i := range 60 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			rel, err := stores[i%3].Reserve(context.Background(), ten, tenant.Usage{Sandboxes: 1, VCPUs: 1, MemoryMiB: 256})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, err)
				return
			}
			ok.Add(1)
			releases = append(releases, rel)
		}()
	}
	close(start)
	wg.Wait()
	if ok.Load() != 5 || len(refusals) != 55 {
		t.Fatalf("%d reservations passed, %d refused; want exactly 5 and 55", ok.Load(), len(refusals))
	}
	for _, err := range refusals {
		if !errors.Is(err, tenant.ErrQuotaExceeded) || err.Error() != "tenant a: 5 of 5 sandboxes in use; remove one or raise max_sandboxes" {
			t.Fatalf("refusal: %v", err)
		}
		if d := errdefs.Details(err); d["used"] != 5 || d["limit"] != 5 || d["asked"] != 1 || d["resource"] != "sandboxes" {
			t.Fatalf("refusal details: %v", d)
		}
	}
	for _, s := range stores {
		used, err := s.Used(context.Background(), "a")
		if err != nil || used != (tenant.Usage{Sandboxes: 5, VCPUs: 5, MemoryMiB: 1280}) {
			t.Fatalf("%s: used %+v, %v; want 5 sandboxes, 5 vCPUs, 1280 MiB", s.node, used, err)
		}
	}
	for _, rel := range releases {
		rel()
		rel()
	}
	for _, s := range stores {
		if used, err := s.Used(context.Background(), "a"); err != nil || used != (tenant.Usage{}) {
			t.Fatalf("%s after the releases: used %+v, %v; want 0", s.node, used, err)
		}
	}
}

// TestQuotaStoreDeadNode: a node that dies keeps its share (its
// sandboxes still count); when it returns with fewer sandboxes (Hold at
// start) its Sync corrects the share; the admin has no quota.
func TestQuotaStoreDeadNode(t *testing.T) {
	nc := startNATS(t, 3)
	stores := quotaStores(t, nc)
	ctx := context.Background()
	ten := &tenant.Tenant{Name: "a", Quota: tenant.Quota{MaxVCPUs: 4}}
	for range 2 {
		if _, err := stores[2].Reserve(ctx, ten, tenant.Usage{Sandboxes: 1, VCPUs: 2}); err != nil {
			t.Fatal(err)
		}
	}
	// n2 dies (its store is gone): its 4 vCPUs still count.
	_, err := stores[0].Reserve(ctx, ten, tenant.Usage{Sandboxes: 1, VCPUs: 1})
	if !errors.Is(err, tenant.ErrQuotaExceeded) || err.Error() != "tenant a: 4 of 4 vCPUs in use, the sandbox asks 1; remove sandboxes, ask for less, or raise max_vcpus" {
		t.Fatalf("with n2 dead: %v", err)
	}
	// n2 returns holding one of its two sandboxes (the other was removed).
	back := NewQuotaStore("n2")
	back.Hold("a", tenant.Usage{Sandboxes: 1, VCPUs: 2})
	back.attach(stores[2].kv)
	if err := back.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if used, err := stores[0].Used(ctx, "a"); err != nil || used != (tenant.Usage{Sandboxes: 1, VCPUs: 2}) {
		t.Fatalf("after n2's return: used %+v, %v", used, err)
	}
	rel, err := stores[0].Reserve(ctx, ten, tenant.Usage{Sandboxes: 1, VCPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	rel()
	if rel, err := stores[1].Reserve(ctx, nil, tenant.Usage{Sandboxes: 1, VCPUs: 64}); err != nil {
		t.Fatal(err)
	} else {
		rel()
	}
}
