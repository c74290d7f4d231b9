package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
)

// benchSnapshots measures issue 4 through the daemon, in one run:
//
//  8. cold create → first exec against warm (--warm) create → first exec,
//     interleaved run by run (the warm template is built before);
//  9. snapshot save and restore (→ first exec) of 256 MiB and 1 GiB
//     guests, and the disk bytes each snapshot costs.
func benchSnapshots(ctx context.Context, img *image.Image, bin, uri string, creates, runs int) {
	// Two daemons: a (no warm pool) for cold creates, warm creates and
	// snapshots; b (--warm-pool 1) for pooled warm creates.
	a := startBenchDaemon(bin, uri)
	defer a.stop()
	b := startBenchDaemon(bin, uri, "--warm-pool", "1")
	defer b.stop()
	cl := a.cl
	var snaps []string
	fail := func(err error) {
		for _, s := range snaps {
			cl.DeleteSnapshot(context.Background(), s)
		}
		a.stop()
		b.stop()
		fail(err)
	}
	// createExec creates a sandbox, runs `true` in it and returns the
	// time from the request to the exec's end.
	createExec := func(cl *client.Client, req api.CreateSandboxRequest) (time.Duration, api.Sandbox) {
		start := time.Now()
		sb, err := cl.CreateSandbox(ctx, req)
		if err != nil {
			fail(fmt.Errorf("create (warm %v): %w", req.Warm, err))
		}
		firstExec(cl, ctx, sb.ID, fail)
		return time.Since(start), sb
	}
	remove := func(cl *client.Client, id string) {
		if err := cl.DeleteSandbox(ctx, id, true); err != nil {
			fail(fmt.Errorf("remove %s: %w", id, err))
		}
	}
	// awaitPool waits until b's pool holds n members in total (its log
	// says "warm pool refilled" once per member), so a refill never runs
	// during another measurement.
	refills := 0
	awaitPool := func() {
		refills++
		for deadline := time.Now().Add(2 * time.Minute); strings.Count(b.log.String(), "warm pool refilled") < refills; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				fail(fmt.Errorf("the warm pool was not refilled within 2 minutes; daemon log:\n%s", b.log.String()))
			}
		}
	}

	// 8. Cold against warm.
	req := api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: 256}
	warmReq := req
	warmReq.Warm = true
	build, sb := createExec(cl, warmReq)
	remove(cl, sb.ID)
	_, sb = createExec(b.cl, warmReq) // b's template; its pool fills after
	remove(b.cl, sb.ID)
	awaitPool()
	var cold, warm, pooled []time.Duration
	for i := 0; i < creates; i++ {
		d, sb := createExec(cl, req)
		remove(cl, sb.ID)
		cold = append(cold, d)
		d, sb = createExec(cl, warmReq)
		remove(cl, sb.ID)
		warm = append(warm, d)
		d, sb = createExec(b.cl, warmReq)
		remove(b.cl, sb.ID)
		pooled = append(pooled, d)
		awaitPool()
		fmt.Fprintf(os.Stderr, "create %d: cold %v, warm %v, warm from the pool %v\n", i+1, cold[i].Round(time.Millisecond), warm[i].Round(time.Millisecond), pooled[i].Round(time.Millisecond))
	}
	mc, mw, mp := median(cold), median(warm), median(pooled)
	fmt.Printf("## 8. Create → first exec: cold boot vs `--warm` (256 MiB, %d interleaved runs)\n\n", creates)
	fmt.Printf("| | median | min | max | vs cold |\n|---|---|---|---|---|\n")
	fmt.Printf("| cold (boot until the agent answers) | %s | %s | %s | 1× |\n", ms(mc), ms(minD(cold)), ms(maxD(cold)))
	fmt.Printf("| warm (copy template, start paused, load, resume, agent, clock, identity) | %s | %s | %s | **%.1f×** |\n", ms(mw), ms(minD(warm)), ms(maxD(warm)), float64(mc)/float64(mw))
	fmt.Printf("| warm from a pool of 1 (resume, agent, clock, identity) | %s | %s | %s | **%.1f×** |\n", ms(mp), ms(minD(pooled)), ms(maxD(pooled)), float64(mc)/float64(mp))
	fmt.Printf("\ntarget: warm ≥ 5× faster than cold. The first warm create, which built the template, took %s; the pool is refilled in the background and each run waits for that before the next measurement.\n\n", ms(build))

	// 9. Save and restore by memory size.
	fmt.Printf("## 9. Snapshot save and restore (%d runs per size; idle guest)\n\n", runs)
	fmt.Printf("| memory | save p50 (API) | save p50 (daemon's) | restore → first exec p50 | vmstate | disk cost per snapshot |\n|---|---|---|---|---|---|\n")
	for _, mem := range []int{256, 1024} {
		src, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: mem})
		if err != nil {
			fail(fmt.Errorf("create %d MiB: %w", mem, err))
		}
		var saves, daemonSaves, restores []time.Duration
		var vmstate, disk int64
		for i := 0; i < runs; i++ {
			name := fmt.Sprintf("bench-%d-%d", mem, i)
			start := time.Now()
			s, err := cl.SaveSnapshot(ctx, src.ID, name)
			if err != nil {
				fail(fmt.Errorf("save %d MiB: %w", mem, err))
			}
			snaps = append(snaps, name)
			saves = append(saves, time.Since(start))
			daemonSaves = append(daemonSaves, time.Duration(s.SaveMs)*time.Millisecond)
			vmstate, disk = s.VMStateBytes, s.DiskBytes
			start = time.Now()
			r, err := cl.RestoreSnapshot(ctx, name, api.RestoreRequest{})
			if err != nil {
				fail(fmt.Errorf("restore %d MiB: %w", mem, err))
			}
			firstExec(cl, ctx, r.ID, fail)
			restores = append(restores, time.Since(start))
			remove(cl, r.ID)
			if err := cl.DeleteSnapshot(ctx, name); err != nil {
				fail(fmt.Errorf("delete snapshot %s: %w", name, err))
			}
			snaps = snaps[:len(snaps)-1]
			fmt.Fprintf(os.Stderr, "%d MiB: save %v, restore %v\n", mem, saves[i].Round(time.Millisecond), restores[i].Round(time.Millisecond))
		}
		remove(cl, src.ID)
		fmt.Printf("| %d MiB | %s | %s | %s | %.1f MiB | %.1f MiB |\n", mem, ms(median(saves)), ms(median(daemonSaves)), ms(median(restores)), float64(vmstate)/(1<<20), float64(disk)/(1<<20))
	}
	fmt.Println()
}

// firstExec runs `true` in sandbox id.
func firstExec(cl *client.Client, ctx context.Context, id string, fail func(error)) {
	st, err := cl.Exec(ctx, id, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
	if err != nil || st.ExitCode != 0 {
		fail(fmt.Errorf("first exec in %s: %v %+v", id, err, st))
	}
}

// benchDaemonProc is one `agentbox serve` of the snapshot benchmarks.
type benchDaemonProc struct {
	cmd  *exec.Cmd
	tmp  string
	cl   *client.Client
	log  *lockedBuffer
	once sync.Once
}

// startBenchDaemon starts `agentbox serve --stop-on-exit EXTRA...` on
// fresh dirs (log level info, kept in log) and waits until it answers.
func startBenchDaemon(bin, uri string, extra ...string) *benchDaemonProc {
	tmp, err := os.MkdirTemp("/tmp", "abs")
	if err != nil {
		fail(err)
	}
	sock := filepath.Join(tmp, "api.sock")
	args := append([]string{"--uri", uri, "--socket", sock, "--state-dir", filepath.Join(tmp, "state"), "--runtime-dir", filepath.Join(tmp, "run"), "--log-level", "info",
		"serve", "--stop-on-exit", "--capacity-vcpus", "256"}, extra...)
	d := &benchDaemonProc{cmd: exec.Command(bin, args...), tmp: tmp, cl: client.New(sock), log: &lockedBuffer{}}
	d.cmd.Stderr = d.log
	if err := d.cmd.Start(); err != nil {
		fail(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := d.cl.Info(context.Background()); err == nil {
			return d
		} else if time.Now().After(deadline) {
			d.stop()
			fail(fmt.Errorf("daemon did not come up: %w; log:\n%s", err, d.log.String()))
		}
	}
}

func (d *benchDaemonProc) stop() {
	d.once.Do(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		d.cmd.Wait()
		os.RemoveAll(d.tmp)
	})
}

// lockedBuffer is a bytes.Buffer safe for a writer and readers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
