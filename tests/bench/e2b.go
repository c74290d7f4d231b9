package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/image"
)

// benchE2B measures the E2B front (issue 13) side by side with
// agentbox's own API, cold and warm: create → first command done, and
// the round trip of `true` in a running sandbox (median of runs).
//
// Two daemons serve the image as template base on an E2B listener, one
// with --e2b-warm. The SDK side is tests/e2b/bench.mjs (the unmodified
// `e2b` package of tests/e2b, installed by `make deps`); agentbox's side
// is vmctl/client over the unix socket: CreateSandbox {template: base,
// warm} then Exec `true`. Both discard a first create (the warm template
// is built by it). Sandboxes get the accelerator `auto` picks on both
// sides, as the E2B API cannot name one.
func benchE2B(ctx context.Context, img *image.Image, bin, uri string, creates, runs int) {
	e2bDir, err := filepath.Abs(filepath.Join("tests", "e2b"))
	if err != nil {
		fail(err)
	}
	if _, err := os.Stat(filepath.Join(e2bDir, "node_modules", "e2b", "package.json")); err != nil {
		fail(fmt.Errorf("the e2b package is not installed in tests/e2b: run `make deps` (npm ci there), from the repository's root"))
	}
	tokenFile := filepath.Join(os.TempDir(), "agentbox-bench-e2b-token")
	tok := make([]byte, 32)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		fail(err)
	}
	defer os.Remove(tokenFile)
	// The daemons' --token-file (a flag before `serve`, which
	// startBenchDaemon does not take): the E2B front's API key.
	os.Setenv("AGENTBOX_TOKEN_FILE", tokenFile)
	defer os.Unsetenv("AGENTBOX_TOKEN_FILE")

	fmt.Printf("## E2B: the SDK vs agentbox's own API (create → first command, `true` round trip)\n\n")
	fmt.Printf("| template | through | create → first command done, median (min–max, %d runs) | `true` round trip, median of %d | accel |\n|---|---|---|---|---|\n", creates, runs)
	for _, warm := range []bool{false, true} {
		addr := freeAddr()
		extra := []string{"--e2b-listen", addr, "--template", "base=" + img.Dir}
		if warm {
			extra = append(extra, "--e2b-warm")
		}
		d := startBenchDaemon(bin, uri, extra...)
		kind := "cold"
		if warm {
			kind = "warm (`--e2b-warm`, `create --warm`)"
		}

		// The SDK.
		cmd := exec.CommandContext(ctx, "node", "bench.mjs")
		cmd.Dir = e2bDir
		cmd.Env = append(os.Environ(), "E2B_API_URL=http://"+addr, "E2B_SANDBOX_URL=http://"+addr, "E2B_API_KEY="+token,
			"E2B_DOMAIN=", "E2B_DEBUG=false", "BENCH_TEMPLATE=base", "BENCH_CREATES="+strconv.Itoa(creates), "BENCH_RUNS="+strconv.Itoa(runs))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			d.stop()
			fail(fmt.Errorf("node bench.mjs: %w\n%s\ndaemon log:\n%s", err, out.String(), d.log.String()))
		}
		var sdk struct {
			CreateMs []float64 `json:"create_ms"`
			RunMs    []float64 `json:"run_ms"`
		}
		if err := json.Unmarshal(out.Bytes(), &sdk); err != nil {
			d.stop()
			fail(fmt.Errorf("node bench.mjs printed %q: %w", out.String(), err))
		}

		// agentbox's own API, the same steps.
		req := api.CreateSandboxRequest{Template: "base", Warm: warm}
		createExec := func() (time.Duration, api.Sandbox) {
			start := time.Now()
			sb, err := d.cl.CreateSandbox(ctx, req)
			if err != nil {
				d.stop()
				fail(fmt.Errorf("create: %w", err))
			}
			firstExec(d.cl, ctx, sb.ID, func(err error) { d.stop(); fail(err) })
			return time.Since(start), sb
		}
		remove := func(id string) {
			if err := d.cl.DeleteSandbox(ctx, id, true); err != nil {
				d.stop()
				fail(fmt.Errorf("remove %s: %w", id, err))
			}
		}
		_, sb := createExec()
		remove(sb.ID)
		var own []time.Duration
		for i := 0; i < creates; i++ {
			t, s := createExec()
			own = append(own, t)
			fmt.Fprintf(os.Stderr, "agentbox api: create → first exec %d: %v\n", i+1, t.Round(time.Millisecond))
			if i < creates-1 {
				remove(s.ID)
			} else {
				sb = s
			}
		}
		// The round trip of `true`, and of what commands.run runs
		// (bash -l -c true), which separates the login shell's cost from
		// the front's.
		roundTrips := func(cmd ...string) []time.Duration {
			var rt []time.Duration
			for i := 0; i < runs+3; i++ {
				start := time.Now()
				st, err := d.cl.Exec(ctx, sb.ID, api.ExecRequest{Cmd: cmd}, io.Discard, io.Discard)
				if err != nil || st.ExitCode != 0 {
					d.stop()
					fail(fmt.Errorf("exec %q: %v %+v", cmd, err, st))
				}
				if i >= 3 {
					rt = append(rt, time.Since(start))
				}
			}
			return rt
		}
		rt, bashRT := roundTrips("true"), roundTrips("/bin/bash", "-l", "-c", "true")
		remove(sb.ID)
		d.stop()

		sdkCreate, sdkRun := msDurations(sdk.CreateMs), msDurations(sdk.RunMs)
		fmt.Printf("| %s | E2B SDK (`Sandbox.create` → `commands.run('true')`) | %s (%s–%s) | %s | %s |\n", kind,
			ms(median(sdkCreate)), ms(minD(sdkCreate)), ms(maxD(sdkCreate)), ms(median(sdkRun)), sb.Accel)
		fmt.Printf("| %s | agentbox API (vmctl/client: create → exec `true`) | %s (%s–%s) | %s (`bash -l -c true`: %s) | %s |\n", kind,
			ms(median(own)), ms(minD(own)), ms(maxD(own)), ms(median(rt)), ms(median(bashRT)), sb.Accel)
	}
	fmt.Printf("\nThe SDK's `commands.run` runs `/bin/bash -l -c CMD` as a detached process followed by a Start stream through the E2B front's data plane, over HTTP/1.1 on loopback; agentbox's exec is one request over the unix socket (the same exec of `bash -l -c true` in parentheses).\n\n")
}

// msDurations turns milliseconds into durations.
func msDurations(ms []float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, v := range ms {
		out[i] = time.Duration(v * float64(time.Millisecond))
	}
	return out
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	defer l.Close()
	return l.Addr().String()
}
