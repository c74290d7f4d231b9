package cluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// natsProcs is a three-server JetStream cluster of nats-server processes
// (AGENTBOX_NATS_SERVER, or the module's nats-server built into a
// temporary directory), so that its CPU and memory can be read apart
// from the test process's in /proc.
type natsProcs struct {
	ports []int
	cmds  []*exec.Cmd
}

func startNATSProcs(b *testing.B) *natsProcs {
	b.Helper()
	bin := os.Getenv("AGENTBOX_NATS_SERVER")
	if bin == "" {
		bin = filepath.Join(b.TempDir(), "nats-server")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput()
		if err != nil {
			b.Fatalf("build nats-server: %v\n%s", err, out)
		}
	}
	p := &natsProcs{}
	ports := freePorts(b, 6)
	routes := ports[3:]
	p.ports = ports[:3]
	dir := b.TempDir()
	for i := range 3 {
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, "nats://127.0.0.1:"+strconv.Itoa(r))
			}
		}
		cmd := exec.Command(bin, "-js", "-a", "127.0.0.1", "-p", strconv.Itoa(p.ports[i]), "-sd", filepath.Join(dir, strconv.Itoa(i)),
			"--auth", testNATSToken, "--server_name", "n"+strconv.Itoa(i), "--cluster_name", "bench",
			"--cluster", "nats://127.0.0.1:"+strconv.Itoa(routes[i]), "--routes", strings.Join(others, ","))
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		p.cmds = append(p.cmds, cmd)
	}
	b.Cleanup(func() {
		for _, c := range p.cmds {
			c.Process.Kill()
			c.Wait()
		}
	})
	return p
}

func (p *natsProcs) urls() []string {
	var out []string
	for _, port := range p.ports {
		out = append(out, "nats://127.0.0.1:"+strconv.Itoa(port))
	}
	return out
}

// procCPU returns a process's user+system CPU time and resident memory
// (from /proc/PID/stat and /proc/PID/status); pid "self" is this one.
func procCPU(b *testing.B, pid string) (time.Duration, int64) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	cpu := time.Duration(utime+stime) * (time.Second / 100) // USER_HZ
	status, _ := os.ReadFile("/proc/" + pid + "/status")
	var rss int64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			rss, _ = strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return cpu, rss << 10
}

// BenchmarkPlacement measures creates admitted through the queue per
// second: three nodes with fake daemons that create at once, b.N creates
// from 32 callers spread over the nodes, on three nats-server processes.
// It reports the CPU time and resident memory of NATS (the three
// servers) next to the test process's (the three agentbox nodes and the
// callers).
func BenchmarkPlacement(b *testing.B) {
	for _, named := range []bool{false, true} {
		b.Run(fmt.Sprintf("named=%v", named), func(b *testing.B) { benchPlacement(b, named) })
	}
}

func benchPlacement(b *testing.B, named bool) {
	procs := startNATSProcs(b)
	nc := &natsCluster{t: b, ports: procs.ports}
	var nodes []*Node
	for i := range 3 {
		nodes = append(nodes, joinNode(b, nc, "n"+strconv.Itoa(i), newFakeLocal(1<<30), func(c *Config) { c.Concurrency = 16 }))
	}
	ctx := context.Background()
	if _, err := nodes[0].Place(ctx, apiReq("", 1)); err != nil { // warm up
		b.Fatal(err)
	}
	natsCPU0, appCPU0 := time.Duration(0), time.Duration(0)
	for _, c := range procs.cmds {
		cpu, _ := procCPU(b, strconv.Itoa(c.Process.Pid))
		natsCPU0 += cpu
	}
	appCPU0, _ = procCPU(b, "self")
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				name := ""
				if named {
					name = fmt.Sprintf("b-%d", i)
				}
				if _, err := nodes[w%3].Place(ctx, apiReq(name, 1)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	var natsCPU time.Duration
	var natsRSS int64
	for _, c := range procs.cmds {
		cpu, rss := procCPU(b, strconv.Itoa(c.Process.Pid))
		natsCPU += cpu
		natsRSS += rss
	}
	appCPU, appRSS := procCPU(b, "self")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
	b.ReportMetric(float64((natsCPU-natsCPU0).Microseconds())/float64(b.N), "nats-cpu-µs/create")
	b.ReportMetric(float64((appCPU-appCPU0).Microseconds())/float64(b.N), "agentbox-cpu-µs/create")
	b.ReportMetric(float64(natsRSS)/(1<<20), "nats-rss-MiB")
	b.ReportMetric(float64(appRSS)/(1<<20), "agentbox-rss-MiB")
}
