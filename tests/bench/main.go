// Command bench measures agentbox against its baselines on this host and
// prints a Markdown report:
//
//  1. `agentbox run --image DIR -- true` wall time against raw
//     qemu-system-x86_64 booting the same kernel, initrd and disk (over a
//     fresh overlay) until the guest agent answers its handshake,
//     interleaved run by run;
//  2. exec round trip of `true` in a running sandbox (p50, p99);
//  3. host→guest file write of 64 MiB (MiB/s);
//  4. the same guest's qemu-ga (Debian's qemu-guest-agent on its own
//     org.qemu.guest_agent.0 channel) driven through libvirt with
//     guest-exec + guest-exec-status: round trip of `sh -c true` and a
//     10 MiB output, against agentbox's agent doing the same;
//  5. the daemon: create → first exec through the REST API;
//  6. exec round trip through the API against the in-process manager;
//  7. the daemon's memory with 20 idle sandboxes;
//  8. with --snapshots (and only those): cold vs warm create → first
//     exec, snapshot save and restore at 256 MiB and 1 GiB, disk bytes
//     per snapshot (snapshots.go);
//  10. with --neighbours (and only that): exec latency of an idle sandbox
//     while a neighbour runs a fork bomb, a memory hog, disk saturation
//     (neighbours.go);
//  11. with --pty N (and only that): keystroke echo round trip through
//     a guest terminal over the interactive exec (pty.go).
//  12. with --watch (and only that): file-watch event latency, write in
//     the guest → agent, and host upload → event at the host (watch.go).
//  13. with --e2b N (and only that): the e2b SDK against the E2B front vs
//     agentbox's own API, cold and warm: create → first command, and N
//     round trips of `true` (e2b.go, tests/e2b/bench.mjs).
//  14. with --density N (and only that): N idle sandboxes of
//     --density-memory MiB, cold-booted or warm-created
//     (--density-mode), their PSS / private / shared memory, the host's
//     MemAvailable drop per sandbox and how many fit in --density-host
//     MiB (density.go).
//  15. with --cluster (and only that): two nodes on an embedded NATS
//     server, create → first exec and the exec round trip directly on
//     the owning node vs through the other (cluster.go).
//
// Usage: go run ./tests/bench --image DIR --agentbox bin/agentbox
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

func main() {
	imgDir := flag.String("image", "", "image directory")
	bin := flag.String("agentbox", "bin/agentbox", "agentbox binary")
	uri := flag.String("uri", "qemu:///system", "libvirt URI")
	boots := flag.Int("boots", 5, "boot runs per side")
	execs := flag.Int("execs", 200, "exec round trips")
	gaRuns := flag.Int("qga-runs", 100, "qemu-ga round trips")
	daemonOnly := flag.Bool("daemon-only", false, "run only the daemon benchmarks (5-7)")
	creates := flag.Int("creates", 5, "daemon creates timed to their first exec")
	idle := flag.Int("idle", 20, "idle sandboxes for the daemon memory figure")
	snapshots := flag.Bool("snapshots", false, "run only the snapshot benchmarks (8-9): cold vs warm creates (--creates runs), save/restore at 256 MiB and 1 GiB (--snapshot-runs)")
	snapshotRuns := flag.Int("snapshot-runs", 3, "save/restore runs per memory size")
	ptyKeys := flag.Int("pty", 0, "run only the PTY benchmark (11): keystroke echo round trip of `N` keys through `exec -it`'s WebSocket and a guest terminal")
	neighbours := flag.Bool("neighbours", false, "run only the noisy-neighbour benchmark (10): exec latency of an idle sandbox (--execs runs) next to a fork bomb, a memory hog and disk saturation")
	watch := flag.Bool("watch", false, "run only the file-watch latency benchmark (11): --execs events in the guest and from the host")
	density := flag.Int("density", 0, "run only the density benchmark (18): start `N` idle sandboxes and measure their memory")
	var dens densityOptions
	flag.StringVar(&dens.mode, "density-mode", "cold", "with --density: `cold` (booted) or warm (the daemon's warm create: clones of a memory template where the daemon makes them)")
	flag.IntVar(&dens.memoryMiB, "density-memory", 512, "with --density: guest RAM of each sandbox, `MiB`")
	flag.IntVar(&dens.tcgCache, "tcg-cache", 0, "with --density: the daemon's TCG translation cache, `MiB` (0: its default)")
	flag.DurationVar(&dens.settle, "density-settle", 20*time.Second, "with --density: idle time before measuring")
	flag.IntVar(&dens.execs, "density-execs", 0, "with --density: time `N` runs of `ls -lR /usr/lib` in the first sandbox afterwards (translation cache effect)")
	flag.IntVar(&dens.hostMiB, "density-host", 24<<10, "with --density: host memory the fit estimate is for, `MiB`")
	clusterOnly := flag.Bool("cluster", false, "run only the cluster benchmark (15): two nodes on an embedded NATS server, create → first exec (--creates runs) and exec round trips (--execs) directly on the owner vs through the other node")
	e2bRuns := flag.Int("e2b", 0, "run only the E2B benchmark (13): the e2b SDK (tests/e2b/bench.mjs) vs agentbox's API, cold and warm, --creates creates and `N` round trips of `true`")
	flag.Parse()
	if *imgDir == "" {
		fail(errors.New("--image DIR is required"))
	}
	ctx := context.Background()
	img, err := image.Load(ctx, *imgDir, image.LoadOptions{})
	if err != nil {
		fail(err)
	}
	host, _ := os.Hostname()
	fmt.Printf("# agentbox benchmarks\n\nhost %s, %s, image %s (kernel %s), TCG\n\n", host, time.Now().UTC().Format(time.RFC3339), img.Manifest.Name, img.Manifest.KernelVersion)

	if *density > 0 {
		if dens.mode != "cold" && dens.mode != "warm" {
			fail(fmt.Errorf("--density-mode %q: want cold or warm", dens.mode))
		}
		dens.n = *density
		benchDensity(ctx, img, *bin, *uri, dens)
		return
	}
	if *clusterOnly {
		benchCluster(ctx, img, *bin, *uri, *creates, *execs) // cluster.go
		return
	}
	if *snapshots {
		benchSnapshots(ctx, img, *bin, *uri, *creates, *snapshotRuns)
		return
	}
	if *watch {
		benchWatch(ctx, img, *bin, *uri, *execs)
		return
	}
	if *e2bRuns > 0 {
		benchE2B(ctx, img, *bin, *uri, *creates, *e2bRuns) // e2b.go
		return
	}
	if *neighbours {
		benchNeighbours(ctx, img, *bin, *uri, *execs)
		return
	}
	if *ptyKeys > 0 {
		benchPty(ctx, img, *bin, *uri, *ptyKeys)
		return
	}
	if !*daemonOnly {
		benchBoot(ctx, img, *bin, *uri, *boots)
		benchGuest(ctx, img, *uri, *execs, *gaRuns)
	}
	benchDaemon(ctx, img, *bin, *uri, *execs, *creates, *idle)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1)
}

// benchBoot interleaves `agentbox run -- true` with raw QEMU boots.
func benchBoot(ctx context.Context, img *image.Image, bin, uri string, runs int) {
	var ours, raw []time.Duration
	for i := 0; i < runs; i++ {
		d, err := timeAgentboxRun(bin, uri, img.Dir)
		if err != nil {
			fail(fmt.Errorf("agentbox run: %w", err))
		}
		ours = append(ours, d)
		d, err = timeRawQEMU(ctx, img)
		if err != nil {
			fail(fmt.Errorf("raw qemu: %w", err))
		}
		raw = append(raw, d)
		fmt.Fprintf(os.Stderr, "boot %d: agentbox %v, raw qemu %v\n", i+1, ours[i].Round(time.Millisecond), raw[i].Round(time.Millisecond))
	}
	mo, mr := median(ours), median(raw)
	fmt.Printf("## 1. Start: `agentbox run -- true` vs raw qemu-system-x86_64 to agent ready (%d interleaved runs)\n\n", runs)
	fmt.Printf("| | median | min | max |\n|---|---|---|---|\n")
	fmt.Printf("| agentbox run -- true (whole CLI: image check, libvirt, overlay, boot, exec, teardown) | %s | %s | %s |\n", ms(mo), ms(minD(ours)), ms(maxD(ours)))
	fmt.Printf("| raw qemu (overlay + boot until handshake) | %s | %s | %s |\n", ms(mr), ms(minD(raw)), ms(maxD(raw)))
	fmt.Printf("\nratio agentbox / raw: **%.2f×** (target ≤ 1.2×)\n\n", float64(mo)/float64(mr))
}

func timeAgentboxRun(bin, uri, imgDir string) (time.Duration, error) {
	state, err := os.MkdirTemp("", "abbench-state")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(state)
	runtime, err := os.MkdirTemp("/tmp", "abr")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(runtime)
	cmd := exec.Command(bin, "--uri", uri, "--state-dir", state, "--runtime-dir", runtime, "run", "--accel", "tcg", "--image", imgDir, "--", "true")
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%v: %s", err, stderr.String())
	}
	return time.Since(start), nil
}

// timeRawQEMU boots the image with a hand-written QEMU command line
// equivalent to agentbox's domain (same machine, devices and cmdline) and
// returns the time from start until the agent's handshake.
func timeRawQEMU(ctx context.Context, img *image.Image) (time.Duration, error) {
	dir, err := os.MkdirTemp("/tmp", "abq")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "a.sock")
	start := time.Now()
	ov := filepath.Join(dir, "overlay.qcow2")
	if err := overlay.Create(ctx, img.Disk, ov, overlay.Options{}); err != nil {
		return 0, err
	}
	m := img.Manifest
	cmd := exec.Command("qemu-system-x86_64", "-accel", "tcg", "-machine", "pc", "-nodefaults", "-nographic", "-no-reboot",
		"-m", fmt.Sprint(m.Resources.MemoryMiB), "-smp", fmt.Sprint(m.Resources.VCPUs),
		"-kernel", img.Kernel, "-initrd", img.Initrd,
		"-append", m.Cmdline+" agentbox.port="+m.AgentPort,
		"-drive", "file="+ov+",if=virtio,format=qcow2",
		"-object", "rng-random,filename=/dev/urandom,id=rng0", "-device", "virtio-rng-pci,rng=rng0",
		"-device", "virtio-serial", "-chardev", "socket,id=ag,path="+sock+",server=on,wait=off",
		"-device", "virtserialport,chardev=ag,name="+m.AgentPort,
		"-serial", "file:"+filepath.Join(dir, "console.log"))
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	var conn net.Conn
	for {
		conn, err = net.Dial("unix", sock)
		if err == nil {
			break
		}
		if time.Since(start) > time.Minute {
			return 0, fmt.Errorf("no agent socket: %w", err)
		}
		time.Sleep(time.Millisecond)
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := agent.Dial(dctx, conn, agent.Options{})
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	c.Close()
	return d, nil
}

// benchGuest runs the in-guest benchmarks in one sandbox that also has
// qemu-ga's channel.
func benchGuest(ctx context.Context, img *image.Image, uri string, execs, gaRuns int) {
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: uri})
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	state, _ := os.MkdirTemp("", "abbench-state")
	defer os.RemoveAll(state)
	runtime, _ := os.MkdirTemp("/tmp", "abr")
	defer os.RemoveAll(runtime)
	drv := libvirt.NewDriver(conn)
	mgr, err := sandbox.NewManager(sandbox.Config{Driver: drv, Limits: resources.New(drv, nil), StateDir: state, RuntimeDir: runtime})
	if err != nil {
		fail(err)
	}
	sb, err := mgr.Create(ctx, sandbox.Options{Image: img, Accel: accel.Choice{DomainType: "qemu", Accel: accel.ModeTCG}, GuestAgentChannel: true})
	if err != nil {
		fail(err)
	}
	defer mgr.Destroy(ctx, sb)

	run := func(argv ...string) (time.Duration, int64) {
		var n countWriter
		start := time.Now()
		st, err := sb.Exec(ctx, agentproto.ExecRequest{Argv: argv}, nil, &n, io.Discard)
		if err != nil || st.Code != 0 {
			fail(fmt.Errorf("exec %v: %v %+v", argv, err, st))
		}
		return time.Since(start), int64(n)
	}
	// Warm up the guest's page cache for the binaries involved.
	run("true")
	run("sh", "-c", "true")

	var trues, shs []time.Duration
	for i := 0; i < execs; i++ {
		d, _ := run("true")
		trues = append(trues, d)
	}
	for i := 0; i < gaRuns; i++ {
		d, _ := run("sh", "-c", "true")
		shs = append(shs, d)
	}
	fmt.Printf("## 2. Exec round trip in a running sandbox\n\n| command | runs | p50 | p99 |\n|---|---|---|---|\n")
	fmt.Printf("| true | %d | %s | %s |\n", execs, ms(pct(trues, 50)), ms(pct(trues, 99)))
	fmt.Printf("| sh -c true | %d | %s | %s |\n\n", gaRuns, ms(pct(shs, 50)), ms(pct(shs, 99)))

	// 3. 64 MiB host→guest file write.
	data := make([]byte, 64<<20)
	rand.Read(data)
	start := time.Now()
	if err := sb.Agent().WriteFile(ctx, "/root/bench.bin", bytes.NewReader(data), 0o644); err != nil {
		fail(err)
	}
	wd := time.Since(start)
	start = time.Now()
	var n countWriter
	if err := sb.Agent().ReadFile(ctx, "/root/bench.bin", &n); err != nil || n != 64<<20 {
		fail(fmt.Errorf("read back: %v (%d bytes)", err, n))
	}
	rd := time.Since(start)
	run("rm", "/root/bench.bin")
	fmt.Printf("## 3. File transfer, 64 MiB\n\n| direction | time | MiB/s |\n|---|---|---|\n")
	fmt.Printf("| host → guest (write, fsync, rename) | %s | %.1f |\n", ms(wd), 64/wd.Seconds())
	fmt.Printf("| guest → host (read) | %s | %.1f |\n\n", ms(rd), 64/rd.Seconds())

	// 4. qemu-ga in the same guest.
	var out bytes.Buffer
	st, err := sb.Exec(ctx, agentproto.ExecRequest{Argv: []string{"sh", "-c", `for p in /sys/class/virtio-ports/*; do [ "$(cat $p/name)" = org.qemu.guest_agent.0 ] && dev=/dev/${p##*/}; done; qemu-ga -m virtio-serial -p "$dev" -d -f /run/qemu-ga.pid && echo started`}}, nil, &out, &out)
	if err != nil || st.Code != 0 {
		fail(fmt.Errorf("start qemu-ga: %v %+v %s", err, st, out.String()))
	}
	gaCall := func(cmd any) (json.RawMessage, error) {
		b, _ := json.Marshal(cmd)
		return conn.AgentCommand(ctx, sb.Domain, b, 60*time.Second)
	}
	// Wait until libvirt sees qemu-ga connected.
	for i := 0; ; i++ {
		if _, err := gaCall(map[string]any{"execute": "guest-ping"}); err == nil {
			break
		} else if i > 200 {
			fail(fmt.Errorf("qemu-ga does not answer: %w", err))
		}
		time.Sleep(50 * time.Millisecond)
	}
	gaExec := func(path string, args ...string) (time.Duration, int, error) {
		start := time.Now()
		r, err := gaCall(map[string]any{"execute": "guest-exec", "arguments": map[string]any{"path": path, "arg": args, "capture-output": true}})
		if err != nil {
			return 0, 0, err
		}
		var pid struct{ PID int }
		json.Unmarshal(r, &pid)
		for {
			r, err := gaCall(map[string]any{"execute": "guest-exec-status", "arguments": map[string]any{"pid": pid.PID}})
			if err != nil {
				return 0, 0, err
			}
			var s struct {
				Exited  bool   `json:"exited"`
				OutData string `json:"out-data"`
			}
			json.Unmarshal(r, &s)
			if s.Exited {
				b, _ := base64.StdEncoding.DecodeString(s.OutData)
				return time.Since(start), len(b), nil
			}
		}
	}
	gaExec("/bin/sh", "-c", "true")
	var gas []time.Duration
	for i := 0; i < gaRuns; i++ {
		d, _, err := gaExec("/bin/sh", "-c", "true")
		if err != nil {
			fail(fmt.Errorf("qemu-ga guest-exec: %w", err))
		}
		gas = append(gas, d)
	}
	const big = 10 << 20
	bigCmd := fmt.Sprintf("head -c %d /dev/zero", big)
	ourBig, ourN := run("sh", "-c", bigCmd)
	gaBig, gaN, gaErr := gaExec("/bin/sh", "-c", bigCmd)
	gaBigCell := fmt.Sprintf("%s (%d bytes)", ms(gaBig), gaN)
	if gaErr != nil {
		gaBigCell = "failed: " + firstLine(gaErr.Error())
	}
	fmt.Printf("## 4. Against qemu-ga in the same guest (through libvirt: guest-exec + guest-exec-status)\n\n")
	fmt.Printf("| | agentbox agent | qemu-ga | ratio |\n|---|---|---|---|\n")
	fmt.Printf("| `sh -c true` p50 (%d runs) | %s | %s | %.2f× |\n", gaRuns, ms(pct(shs, 50)), ms(pct(gas, 50)), float64(pct(shs, 50))/float64(pct(gas, 50)))
	fmt.Printf("| `sh -c true` p99 | %s | %s | %.2f× |\n", ms(pct(shs, 99)), ms(pct(gas, 99)), float64(pct(shs, 99))/float64(pct(gas, 99)))
	fmt.Printf("| 10 MiB stdout | %s (%d bytes, streamed) | %s | |\n\n", ms(ourBig), ourN, gaBigCell)
}

type countWriter int64

// Write implements io.Writer.
func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func sorted(ds []time.Duration) []time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s
}

func median(ds []time.Duration) time.Duration { return pct(ds, 50) }

// pct is the nearest-rank percentile p (0..100) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := sorted(ds)
	i := (p*len(s) + 99) / 100
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

func minD(ds []time.Duration) time.Duration { return sorted(ds)[0] }
func maxD(ds []time.Duration) time.Duration { s := sorted(ds); return s[len(s)-1] }
