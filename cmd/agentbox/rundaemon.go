package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/agentproto"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
)

// Labels `agentbox run` puts on the sandboxes it creates, through a
// daemon or in-process: runLabel marks them all, runIDLabel is unique per
// invocation so an interrupted create can find its sandbox again.
const (
	runLabel   = "agentbox.run"
	runIDLabel = "agentbox.run-id"
)

// teardownTimeout bounds the removal of a `run` sandbox after the command.
const teardownTimeout = 2 * time.Minute

// runTarget is the service `agentbox run` sends its requests to: a
// daemon on a socket or over TCP, or the in-process one (local.go). The
// requests are the same; only what outlives the command differs.
type runTarget struct {
	cl *client.Client
	// by names the service in the -v "booted in" line: " by the daemon at
	// ADDR", or "" in-process.
	by string
	// ttl gives a sandbox not --keep'ed a TTL, a backstop should this
	// command be killed: a daemon outlives it; an in-process sandbox dies
	// with it (libvirt autodestroy) and needs none.
	ttl bool
	// kept tells the user how to reach and remove a sandbox left running
	// by --keep.
	kept func(api.Sandbox)
}

// daemonTarget is the daemon cl reaches, as the global flags name it.
func daemonTarget(c *cli.Context, cl *client.Client) runTarget {
	return runTarget{cl: cl, by: " by the daemon at " + daemonAddr(c), ttl: true, kept: func(sb api.Sandbox) {
		fmt.Fprintf(c.App.ErrWriter, "agentbox: sandbox %s kept running\n  exec:   agentbox exec %s -- COMMAND [ARG...]\n  remove: agentbox rm -f %s\n", sb.ID, sb.ID, sb.ID)
	}}
}

// newRunID returns a fresh run ID: 16 hex digits, the runIDLabel of the
// run's sandbox (and the name of an in-process run's state).
func newRunID() string {
	nonce := make([]byte, 8)
	rand.Read(nonce) // never fails (crypto/rand)
	return hex.EncodeToString(nonce)
}

// runIdleTimeout is the idle timeout of a sandbox `agentbox run` makes
// through a daemon (not kept): a CLI killed with kill -9 cannot remove
// its sandbox, and the daemon's reaper removes it this long after its
// last command ended (a command in flight is never idle; the daemon ends
// an exec whose client went away). An in-process run's sandbox dies with
// the process instead (libvirt's autodestroy).
const runIdleTimeout = time.Minute

// runSandbox is `agentbox run` against t: create a sandbox from creq
// (labelled with runIDLabel), run req in it like `exec` does, remove it
// (also on errors and signals) unless --keep. Against a daemon, a sandbox
// not kept carries an idle timeout of runIdleTimeout and a TTL of
// max(--timeout, 1h) + --boot-timeout, so a killed CLI never leaks it
// for long.
func runSandbox(ctx context.Context, c *cli.Context, t runTarget, creq api.CreateSandboxRequest, req agentproto.ExecRequest, gotSignal func() syscall.Signal) error {
	cl, runID := t.cl, creq.Labels[runIDLabel]
	keep := c.Bool("keep")
	if !keep && t.ttl {
		ttl := max(c.Duration("timeout"), time.Hour) + c.Duration("boot-timeout")
		creq.Limits.TTLSeconds = int64((ttl + time.Second - 1) / time.Second)
		if creq.Limits.IdleTimeoutSeconds == 0 {
			creq.Limits.IdleTimeoutSeconds = int64(runIdleTimeout / time.Second)
		}
	}
	sb, err := cl.CreateSandbox(ctx, creq)
	if err != nil {
		if sig := gotSignal(); sig != 0 {
			return signalExit(sig, "interrupted while booting; "+removeRunSandboxes(ctx, cl, runID))
		}
		return err
	}
	if c.Bool("verbose") {
		fmt.Fprintf(c.App.ErrWriter, "agentbox: sandbox %s booted in %d ms%s (%s, %d vCPU, %d MiB)\n", sb.ID, sb.BootMs, t.by, sb.Accel, sb.VCPUs, sb.MemoryMiB)
	}
	defer func() {
		if keep {
			t.kept(sb)
			return
		}
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
		defer cancel()
		if err := cl.DeleteSandbox(tctx, sb.ID, true); err != nil {
			fmt.Fprintf(c.App.ErrWriter, "agentbox: teardown of sandbox %s: %v (remove it with `agentbox rm -f %s`)\n", sb.ID, err, sb.ID)
		}
	}()
	err = daemonExec(ctx, c, cl, sb.ID, apiExecRequest(req))
	var ee *exitError
	if sig := gotSignal(); sig != 0 && !errors.As(err, &ee) {
		return signalExit(sig, fmt.Sprintf("%s: guest command killed", sig))
	}
	return err
}

// removeRunSandboxes removes what a create interrupted by a signal may have
// left (the daemon may finish a boot whose caller went away) and says what
// became of it.
func removeRunSandboxes(ctx context.Context, cl *client.Client, runID string) string {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
	defer cancel()
	sbs, err := cl.ListSandboxes(tctx, map[string]string{runIDLabel: runID}, "")
	if err == nil {
		for _, sb := range sbs {
			if derr := cl.DeleteSandbox(tctx, sb.ID, true); derr != nil && !api.HasCode(derr, api.CodeNotFound) {
				err = derr
			}
		}
	}
	if err != nil {
		return fmt.Sprintf("a sandbox may remain until its TTL: %v (see `agentbox ls --label %s=%s`)", err, runIDLabel, runID)
	}
	return "sandbox removed"
}

// daemonAddr names the daemon the global flags select, for messages.
func daemonAddr(c *cli.Context) string {
	if h := c.String("host"); h != "" {
		return h
	}
	return c.String("socket")
}
