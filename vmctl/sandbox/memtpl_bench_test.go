package sandbox_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
)

// BenchmarkWarmCreate measures create → first exec done (`true`) on real
// TCG guests of 512 MiB and 2 GiB: a cold boot, a clone of a memory
// template (no pool), a warm create from a snapshot template (the earlier
// mechanism: copy, paused start, load of the whole RAM), and a clone
// taken from a pool of 1 (a paused "-incoming defer" domain: load of the
// device state, resume). Templates are built, and pools refilled, outside
// the timer; every sandbox is destroyed outside it. Reports ms/create.
//
//	AGENTBOX_TEST_IMAGE=… go test -run '^$' -bench WarmCreate -benchtime 5x ./vmctl/sandbox/
func BenchmarkWarmCreate(b *testing.B) {
	for _, mem := range []int{512, 2048} {
		for _, kind := range []string{"cold", "memory", "snapshot", "memory-pool"} {
			b.Run(fmt.Sprintf("%s/%dMiB", kind, mem), func(b *testing.B) {
				f := newMemFixture(b)
				ctx := context.Background()
				opts := sandbox.Options{Image: f.img, Accel: tcg, MemoryMiB: mem}
				if kind == "snapshot" {
					f.ws.SetMode(warm.ModeSnapshot)
				}
				pool := kind == "memory-pool"
				if pool {
					f.ws.SetPool(1)
					b.Cleanup(func() { f.ws.Drain(context.Background()) })
				}
				create := func() *sandbox.Sandbox {
					var sb *sandbox.Sandbox
					var err error
					if kind == "cold" {
						sb, err = f.mgr.Create(ctx, opts)
					} else {
						sb, err = f.ws.Create(ctx, opts)
					}
					if err != nil {
						b.Fatal(err)
					}
					if st, err := sb.Exec(ctx, agentproto.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard); err != nil || st.Code != 0 {
						b.Fatalf("first exec: %v %+v", err, st)
					}
					return sb
				}
				if kind != "cold" { // the template (and the pool's first member)
					f.mgr.Destroy(ctx, create())
				}
				waitPool := func() {
					for deadline := time.Now().Add(2 * time.Minute); pool; time.Sleep(20 * time.Millisecond) {
						if ts := f.ws.Templates(); len(ts) == 1 && ts[0].Pooled == 1 {
							return
						} else if time.Now().After(deadline) {
							b.Fatal("the pool was not refilled within 2 minutes")
						}
					}
				}
				var total time.Duration
				for range b.N {
					waitPool()
					start := time.Now()
					sb := create()
					total += time.Since(start)
					b.StopTimer()
					f.mgr.Destroy(ctx, sb)
					b.StartTimer()
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/create")
			})
		}
	}
}
