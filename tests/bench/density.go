package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
)

// densityOptions are the flags of the density benchmark (--density N).
type densityOptions struct {
	n         int    // idle sandboxes to start
	mode      string // "cold" (booted) or "warm" (the daemon's warm create: memory-template clones where the daemon has them)
	memoryMiB int    // guest RAM of each
	tcgCache  int    // serve --tcg-cache MiB (0: the daemon's default)
	settle    time.Duration
	execs     int // exec round trips timed in the first sandbox (0: none)
	hostMiB   int // the host memory the fit estimate is for
}

// benchDensity starts o.n idle sandboxes of o.memoryMiB through a private
// daemon, one after another (cold boots, or warm creates), lets them
// settle, and reports each one's memory as the daemon's usage reports it
// (PSS, private, shared, anonymous: smaps_rollup of its QEMU) and the drop
// of the host's MemAvailable per sandbox; from the larger of the two per
// sandbox it estimates how many idle sandboxes fit in o.hostMiB (minus
// 1 GiB for the host). The host is shared with whatever else runs: the
// MemAvailable figure includes their changes, the PSS sum does not.
func benchDensity(ctx context.Context, img *image.Image, bin, uri string, o densityOptions) {
	tmp, err := os.MkdirTemp("/tmp", "abdens")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	sock := filepath.Join(tmp, "api.sock")
	args := []string{"--uri", uri, "--socket", sock, "--state-dir", filepath.Join(tmp, "state"), "--runtime-dir", filepath.Join(tmp, "run"), "--log-level", "warn",
		"serve", "--stop-on-exit", "--capacity-vcpus", "1024", "--capacity-memory", strconv.Itoa(1 << 22), "--usage-interval", "2s"}
	if o.tcgCache > 0 {
		args = append(args, "--tcg-cache", strconv.Itoa(o.tcgCache))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	defer stop()
	fail := func(err error) {
		stop()
		os.RemoveAll(tmp)
		fail(err)
	}
	cl := client.New(sock)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := cl.Info(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			fail(fmt.Errorf("daemon did not come up: %w", err))
		}
	}
	req := api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: o.memoryMiB, Warm: o.mode == "warm"}
	if o.mode == "warm" { // the first warm create builds the template: not part of the figure
		sb, err := cl.CreateSandbox(ctx, req)
		if err != nil {
			fail(fmt.Errorf("warm template: %w", err))
		}
		if err := cl.DeleteSandbox(ctx, sb.ID, true); err != nil {
			fail(err)
		}
		time.Sleep(o.settle)
	}
	before := memAvailableMiB()
	var ids []string
	var firsts []time.Duration
	for i := 0; i < o.n; i++ {
		start := time.Now()
		sb, err := cl.CreateSandbox(ctx, req)
		if err != nil {
			fail(fmt.Errorf("create %d of %d: %w", i+1, o.n, err))
		}
		if _, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard); err != nil {
			fail(fmt.Errorf("first exec in %s: %w", sb.ID, err))
		}
		firsts = append(firsts, time.Since(start))
		ids = append(ids, sb.ID)
		fmt.Fprintf(os.Stderr, "density: %d/%d up in %v, MemAvailable %d MiB\n", i+1, o.n, firsts[i].Round(time.Millisecond), memAvailableMiB())
	}
	time.Sleep(o.settle)
	after := memAvailableMiB()
	var pss, priv, shared, anon, rss []float64
	for _, id := range ids {
		var m *api.MemoryUsage
		var u *api.Usage
		for deadline := time.Now().Add(20 * time.Second); m == nil && time.Now().Before(deadline); time.Sleep(time.Second) {
			sb, err := cl.GetSandbox(ctx, id)
			if err != nil {
				fail(err)
			}
			if sb.Usage != nil && sb.Usage.SampledAt.After(time.Now().Add(-3*time.Second)) {
				u, m = sb.Usage, sb.Usage.Memory
			}
		}
		if m == nil {
			fail(fmt.Errorf("no fresh memory usage of %s", id))
		}
		pss, priv, shared, anon = append(pss, mibf(m.PSSBytes)), append(priv, mibf(m.PrivateBytes)), append(shared, mibf(m.SharedBytes)), append(anon, mibf(m.AnonBytes))
		rss = append(rss, mibf(u.MemoryRSSBytes))
	}
	var execLat []time.Duration
	for i := 0; i < o.execs; i++ {
		start := time.Now()
		if _, err := cl.Exec(ctx, ids[0], api.ExecRequest{Cmd: []string{"sh", "-c", "ls -lR /usr/lib >/dev/null; true"}}, io.Discard, io.Discard); err != nil {
			fail(err)
		}
		execLat = append(execLat, time.Since(start))
	}
	sumPSS := sum(pss)
	drop := float64(before-after) / float64(o.n)
	per := max(sumPSS/float64(o.n), drop)
	fit := int(float64(o.hostMiB-1024) / per)
	cache := "default"
	if o.tcgCache > 0 {
		cache = fmt.Sprintf("%d MiB", o.tcgCache)
	}
	fmt.Printf("## Density: %d idle %s sandboxes of %d MiB (TCG, translation cache %s)\n\n", o.n, o.mode, o.memoryMiB, cache)
	fmt.Printf("| per sandbox (MiB) | mean | min | max |\n|---|---|---|---|\n")
	for _, r := range []struct {
		name string
		v    []float64
	}{{"PSS", pss}, {"private", priv}, {"shared", shared}, {"anonymous", anon}, {"RSS", rss}} {
		fmt.Printf("| %s | %.1f | %.1f | %.1f |\n", r.name, sum(r.v)/float64(len(r.v)), minF(r.v), maxF(r.v))
	}
	fmt.Printf("\nsum of PSS %.0f MiB; host MemAvailable %d → %d MiB: drop %.1f MiB per sandbox; create → first exec p50 %s (max %s)\n",
		sumPSS, before, after, drop, ms(median(firsts)), ms(maxD(firsts)))
	if len(execLat) > 0 {
		fmt.Printf("exec `ls -lR /usr/lib` in the first sandbox: p50 %s, min %s, max %s (%d runs)\n", ms(median(execLat)), ms(minD(execLat)), ms(maxD(execLat)), len(execLat))
	}
	fmt.Printf("fit in %d MiB (1 GiB kept for the host), at max(PSS, MemAvailable drop) = %.0f MiB each: **%d idle sandboxes**\n\n", o.hostMiB, per, fit)
}

func mibf(b uint64) float64 { return float64(b) / (1 << 20) }

func sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

func minF(v []float64) float64 { s := append([]float64(nil), v...); sort.Float64s(s); return s[0] }
func maxF(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)-1]
}

// memAvailableMiB is the host's MemAvailable from /proc/meminfo, MiB.
func memAvailableMiB() int {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kib, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kib >> 10
		}
	}
	return 0
}
