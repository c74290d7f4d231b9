package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/image"
)

// benchCluster measures request routing in a cluster (issue 15): two
// nodes on an embedded NATS server, "own" holds every sandbox ("via" is
// drained), and each figure is taken directly on own and through via (the
// create queued to own, the exec reverse-proxied), interleaved so host
// noise hits both alike: create → first exec (creates runs per side), and
// the exec round trip of `true` (execs runs per side).
func benchCluster(ctx context.Context, img *image.Image, bin, uri string, creates, execs int) {
	tmp, err := os.MkdirTemp("/tmp", "abc")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	port := func() int {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fail(err)
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port
	}
	const natsToken = "bench-nats-token-0123456789"
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port(), JetStream: true, StoreDir: filepath.Join(tmp, "nats"), NoLog: true, NoSigs: true, Authorization: natsToken})
	if err != nil {
		fail(err)
	}
	go ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(30 * time.Second) {
		fail(fmt.Errorf("NATS did not come up"))
	}
	const token = "bench-token-0123456789abcdef"
	tokenFile, clusterFile := filepath.Join(tmp, "api.token"), filepath.Join(tmp, "cluster.token")
	for _, f := range []string{tokenFile, clusterFile} {
		if err := os.WriteFile(f, []byte(token+"\n"), 0o600); err != nil {
			fail(err)
		}
	}
	var procs []*exec.Cmd
	stop := func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
		procs = nil
		ns.Shutdown()
		os.RemoveAll(tmp)
	}
	defer stop()
	fail := func(err error) { stop(); fail(err) }
	clients := map[string]*client.Client{}
	for i, name := range []string{"own", "via"} {
		dir := filepath.Join(tmp, name)
		addr := "127.0.0.1:" + strconv.Itoa(port())
		cmd := exec.Command(bin, "--uri", uri, "--socket", filepath.Join(dir, "api.sock"), "--state-dir", filepath.Join(dir, "state"),
			"--runtime-dir", filepath.Join(dir, "run"), "--log-level", "warn", "--token-file", tokenFile,
			"serve", "--stop-on-exit", "--listen-tcp", addr,
			"--network-table", fmt.Sprintf("abbench%d%s", os.Getpid(), name), "--network-pool", fmt.Sprintf("10.233.%d.0/24", 10+i),
			"--cluster", strings.Replace(ns.ClientURL(), "nats://", "nats://"+natsToken+"@", 1), "--node", name, "--advertise", "http://"+addr, "--cluster-trusted-network", "--cluster-token-file", clusterFile)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			fail(err)
		}
		procs = append(procs, cmd)
		if clients[name], err = client.NewTCP("http://"+addr, client.WithToken(token)); err != nil {
			fail(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		nodes, err := clients["via"].ListNodes(ctx)
		up := 0
		for _, n := range nodes {
			if n.State == "up" {
				up++
			}
		}
		if err == nil && up == 2 {
			break
		}
		if time.Now().After(deadline) {
			fail(fmt.Errorf("the two nodes did not come up: %v %+v", err, nodes))
		}
	}
	if _, err := clients["via"].DrainNode(ctx, "via", true); err != nil {
		fail(err)
	}
	own, via := clients["own"], clients["via"]
	first := func(cl *client.Client) time.Duration {
		start := time.Now()
		sb, err := cl.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg"})
		if err != nil {
			fail(fmt.Errorf("create: %w", err))
		}
		st, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
		if err != nil || st.ExitCode != 0 {
			fail(fmt.Errorf("first exec: %v %+v", err, st))
		}
		d := time.Since(start)
		if sb.Node != "own" {
			fail(fmt.Errorf("sandbox %s made on %q, want own", sb.ID, sb.Node))
		}
		if err := own.DeleteSandbox(ctx, sb.ID, true); err != nil {
			fail(err)
		}
		return d
	}
	var firstDirect, firstProxied []time.Duration
	for range creates {
		firstDirect = append(firstDirect, first(own))
		firstProxied = append(firstProxied, first(via))
	}
	sb, err := own.CreateSandbox(ctx, api.CreateSandboxRequest{Image: img.Dir, Accel: "tcg"})
	if err != nil {
		fail(err)
	}
	run := func(cl *client.Client) time.Duration {
		start := time.Now()
		st, err := cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"true"}}, io.Discard, io.Discard)
		if err != nil || st.ExitCode != 0 {
			fail(fmt.Errorf("exec: %v %+v", err, st))
		}
		return time.Since(start)
	}
	run(own)
	run(via)
	var direct, proxied []time.Duration
	for i := 0; i < execs; i += 10 {
		for range 10 {
			direct = append(direct, run(own))
		}
		for range 10 {
			proxied = append(proxied, run(via))
		}
	}
	if err := own.DeleteSandbox(ctx, sb.ID, true); err != nil {
		fail(err)
	}
	fmt.Printf("## 15. Cluster: direct on the owning node vs through another node (TCP API, token; NATS embedded)\n\n| figure | path | runs | p50 | p99 / max |\n|---|---|---|---|---|\n")
	fmt.Printf("| create → first exec | direct (own) | %d | %s | %s |\n", len(firstDirect), ms(median(firstDirect)), ms(maxD(firstDirect)))
	fmt.Printf("| create → first exec | through via (queued create, proxied exec) | %d | %s | %s |\n", len(firstProxied), ms(median(firstProxied)), ms(maxD(firstProxied)))
	fmt.Printf("| exec round trip of `true` | direct (own) | %d | %s | %s |\n", len(direct), ms(pct(direct, 50)), ms(pct(direct, 99)))
	fmt.Printf("| exec round trip of `true` | proxied (via → own) | %d | %s | %s |\n\n", len(proxied), ms(pct(proxied, 50)), ms(pct(proxied, 99)))
}
