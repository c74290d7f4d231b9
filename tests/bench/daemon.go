package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// benchDaemon measures the daemon (issue 3): exec round trip through the
// REST API against the in-process manager, create→first-exec latency, and
// the daemon's memory with idle sandboxes.
func benchDaemon(ctx context.Context, img *image.Image, bin, uri string, execs, creates, idle int) {
	tmp, err := os.MkdirTemp("/tmp", "abd")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	sock := filepath.Join(tmp, "api.sock")
	// --stop-on-exit: the sandboxes go with the daemon, also when a step
	// fails; the capacity is raised so the idle-memory step is not refused.
	cmd := exec.Command(bin, "--uri", uri, "--socket", sock, "--state-dir", filepath.Join(tmp, "state"), "--runtime-dir", filepath.Join(tmp, "run"), "--log-level", "warn",
		"serve", "--stop-on-exit", "--capacity-vcpus", "256")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	stopDaemon := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	}
	defer stopDaemon()
	var cleanups []func()
	fail := func(err error) {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		stopDaemon()
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
	rssIdle := rssKiB(cmd.Process.Pid)

	// 1. Create → first exec, through the API.
	var firsts, boots []time.Duration
	var ids []string
	for i := 0; i < creates; i++ {
		start := time.Now()
		sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg"})
		if err != nil {
			fail(fmt.Errorf("create: %w", err))
		}
		st, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
		if err != nil || st.ExitCode != 0 {
			fail(fmt.Errorf("first exec: %v %+v", err, st))
		}
		firsts = append(firsts, time.Since(start))
		boots = append(boots, time.Duration(sb.BootMs)*time.Millisecond)
		if i == 0 {
			ids = append(ids, sb.ID) // kept for the exec round trips
			continue
		}
		// Each create runs next to the one kept sandbox only.
		if err := cl.DeleteSandbox(ctx, sb.ID, true); err != nil {
			fail(fmt.Errorf("remove %s: %w", sb.ID, err))
		}
	}
	fmt.Printf("## 5. Daemon: create → first exec through the API (one other idle sandbox running)\n\n| runs | p50 | min | max | boot (agent handshake) p50 |\n|---|---|---|---|---|\n")
	fmt.Printf("| %d | %s | %s | %s | %s |\n\n", creates, ms(median(firsts)), ms(minD(firsts)), ms(maxD(firsts)), ms(median(boots)))

	// 2. Exec round trip: API vs in-process manager, interleaved in
	// blocks so host noise hits both alike.
	apiExec := func() time.Duration {
		start := time.Now()
		st, err := cl.Exec(ctx, ids[0], api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
		if err != nil || st.ExitCode != 0 {
			fail(fmt.Errorf("api exec: %v %+v", err, st))
		}
		return time.Since(start)
	}
	conn, err := libvirt.Connect(ctx, libvirt.Config{URI: uri})
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	drv := libvirt.NewDriver(conn)
	mgr, err := sandbox.NewManager(sandbox.Config{Driver: drv, Limits: resources.New(drv, nil), StateDir: filepath.Join(tmp, "inproc"), RuntimeDir: filepath.Join(tmp, "r2")})
	if err != nil {
		fail(err)
	}
	local, err := mgr.Create(ctx, sandbox.Options{Image: img, Accel: accel.Choice{DomainType: "qemu", Accel: accel.ModeTCG}})
	if err != nil {
		fail(err)
	}
	defer mgr.Destroy(ctx, local)
	cleanups = append(cleanups, func() { mgr.Destroy(ctx, local) })
	localExec := func() time.Duration {
		start := time.Now()
		st, err := local.Exec(ctx, agentproto.ExecRequest{Argv: []string{"true"}}, nil, io.Discard, io.Discard)
		if err != nil || st.Code != 0 {
			fail(fmt.Errorf("in-process exec: %v %+v", err, st))
		}
		return time.Since(start)
	}
	apiExec()
	localExec()
	var viaAPI, inProc []time.Duration
	for i := 0; i < execs; i += 10 {
		for j := 0; j < 10; j++ {
			viaAPI = append(viaAPI, apiExec())
		}
		for j := 0; j < 10; j++ {
			inProc = append(inProc, localExec())
		}
	}
	fmt.Printf("## 6. Exec round trip of `true`: REST API (unix socket, ndjson stream, audit + history write) vs in-process manager\n\n| path | runs | p50 | p99 |\n|---|---|---|---|\n")
	fmt.Printf("| API (vmctl/client → agentbox serve) | %d | %s | %s |\n", len(viaAPI), ms(pct(viaAPI, 50)), ms(pct(viaAPI, 99)))
	fmt.Printf("| in-process (sandbox.Manager) | %d | %s | %s |\n\n", len(inProc), ms(pct(inProc, 50)), ms(pct(inProc, 99)))

	// 3. Memory of the daemon with idle sandboxes.
	for len(ids) < idle {
		sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg", MemoryMiB: 256})
		if err != nil {
			fail(fmt.Errorf("create idle sandbox %d: %w", len(ids)+1, err))
		}
		ids = append(ids, sb.ID)
	}
	time.Sleep(2 * time.Second)
	rss := rssKiB(cmd.Process.Pid)
	hwm := hwmKiB(cmd.Process.Pid)
	fmt.Printf("## 7. Daemon memory\n\n| sandboxes | daemon VmRSS | daemon VmHWM |\n|---|---|---|\n")
	fmt.Printf("| 0 (just started) | %d MiB | |\n", rssIdle/1024)
	fmt.Printf("| %d idle (after the exec runs above) | %.1f MiB | %.1f MiB |\n\n", len(ids), float64(rss)/1024, float64(hwm)/1024)
	for _, id := range ids {
		if err := cl.DeleteSandbox(ctx, id, true); err != nil {
			fail(fmt.Errorf("remove %s: %w", id, err))
		}
	}
}

func rssKiB(pid int) int64 { return procStatus(pid, "VmRSS:") }
func hwmKiB(pid int) int64 { return procStatus(pid, "VmHWM:") }

// procStatus reads one "kB" field of /proc/PID/status.
func procStatus(pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), key); ok {
			var n int64
			fmt.Sscanf(strings.TrimSpace(rest), "%d", &n)
			return n
		}
	}
	return 0
}
