package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/image"
)

// neighbourLoads are what the noisy neighbour runs, each as a detached
// process that keeps going until killed.
var neighbourLoads = []struct{ name, script string }{
	{"fork bomb", "f() { f | f & }; f; sleep 100000"},
	{"memory hog", "while :; do head -c 2000m /dev/zero | tail -n 1 >/dev/null; done"},
	{"disk saturation", "while :; do dd if=/dev/zero of=/fill bs=1M count=512 oflag=direct 2>/dev/null; rm -f /fill; done"},
}

// benchNeighbours measures issue 5's isolation through the daemon:
//
//  10. exec round trip (p50, p99) of `true` in an idle sandbox, alone and
//     while a neighbour sandbox runs a fork bomb, a memory hog and disk
//     saturation (each started 5 s before the measurement and killed
//     after it).
func benchNeighbours(ctx context.Context, img *image.Image, bin, uri string, execs int) {
	d := startBenchDaemon(bin, uri)
	defer d.stop()
	cl := d.cl
	var made []string
	fail := func(err error) {
		for _, id := range made {
			cl.DeleteSandbox(context.Background(), id, true)
		}
		d.stop()
		fail(err)
	}
	create := func(req api.CreateSandboxRequest) api.Sandbox {
		sb, err := cl.CreateSandbox(ctx, req)
		if err != nil {
			fail(fmt.Errorf("create: %w", err))
		}
		made = append(made, sb.ID)
		firstExec(cl, ctx, sb.ID, fail)
		return sb
	}
	idle := create(api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: 256})
	noisy := create(api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: 512, DiskMiB: 2048 + 1024})
	measure := func() (p50, p99 time.Duration) {
		var ds []time.Duration
		for range execs {
			start := time.Now()
			st, err := cl.Exec(ctx, idle.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
			if err != nil || st.ExitCode != 0 {
				fail(fmt.Errorf("exec in the idle sandbox: %v %+v", err, st))
			}
			ds = append(ds, time.Since(start))
		}
		return median(ds), pct(ds, 99)
	}
	fmt.Printf("## 10. Exec latency of an idle sandbox next to a noisy neighbour (%d execs of `true` each)\n\n", execs)
	fmt.Println("| neighbour runs | p50 | p99 | p50 vs alone |")
	fmt.Println("|---|---|---|---|")
	base50, base99 := measure()
	fmt.Printf("| nothing | %s | %s | 1.00× |\n", ms(base50), ms(base99))
	for _, load := range neighbourLoads {
		p, err := cl.StartProcess(ctx, noisy.ID, api.ExecRequest{Cmd: []string{"sh", "-c", load.script}})
		if err != nil {
			fail(fmt.Errorf("start %s: %w", load.name, err))
		}
		time.Sleep(5 * time.Second)
		p50, p99 := measure()
		if err := cl.KillProcess(ctx, noisy.ID, p.ID, "KILL"); err != nil {
			fail(fmt.Errorf("kill %s: %w", load.name, err))
		}
		fmt.Printf("| %s | %s | %s | %.2f× |\n", load.name, ms(p50), ms(p99), float64(p50)/float64(base50))
		// Let the neighbour settle (the bomb's shells die with their group).
		time.Sleep(5 * time.Second)
	}
	fmt.Println()
	for _, id := range made {
		if err := cl.DeleteSandbox(ctx, id, true); err != nil {
			fail(fmt.Errorf("remove %s: %w", id, err))
		}
	}
	made = nil
}
