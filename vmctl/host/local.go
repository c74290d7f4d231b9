package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/libvirt"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// startLocal is Start for a local host: the same daemon.Daemon and API
// server that serve runs, served on a Listener only this process can
// dial (Host.Client), with its own state (one run directory, rundir.go)
// and domains that die with the process (libvirt's autodestroy, unless
// LocalOptions.Keep). It sweeps what killed in-process runs left first.
func (h *Host) startLocal(ctx context.Context, stateDir, runtimeDir string) error {
	o, lo, logger := h.o, h.o.Local, h.log
	if err := h.connect(ctx); err != nil {
		return err
	}
	h.undo.Add("libvirt connection", func(context.Context) error { return h.closeConn() })
	h.sweep(ctx, stateDir)

	run, err := newRunDir(stateDir, runtimeDir, lo.RunID)
	if err != nil {
		return err
	}
	h.run = run
	// The run's files go after the connection closes (its autodestroy
	// ends the run's domains first); the connection's own step then has
	// nothing left to do.
	h.undo.Add("run state", func(context.Context) error {
		return errors.Join(h.closeConn(), run.Close(h.keepFiles))
	})
	var drvOpts []libvirt.DriverOption
	if !lo.Keep {
		drvOpts = append(drvOpts, libvirt.WithAutoDestroy())
	}
	makeNetwork := lo.Network
	if makeNetwork == nil {
		makeNetwork = func() (sandbox.NetworkProvider, error) { return NewNetwork(logger) }
	}
	d, err := daemon.New(ctx, daemon.Config{
		Driver:     libvirt.NewDriver(h.conn, drvOpts...),
		StateDir:   run.Dir,
		RuntimeDir: run.RuntimeDir,
		Logger:     logger,
		Version:    o.Version,
		Accel: func(m accel.Mode) (accel.Choice, error) {
			choice, err := accel.Choose(m, nil)
			if err == nil && lo.OnAccel != nil {
				lo.OnAccel(m, choice)
			}
			return choice, err
		},
		// Held to the host's capacity as the daemon is (its defaults:
		// the host's memory minus 1 GiB, 4 vCPUs per host CPU), so a
		// request the host cannot hold is refused at once with the
		// numbers instead of failing in QEMU or timing out in the boot.
		// One run, one sandbox: no usage thresholds, as for a VM
		// started by hand.
		CapacityHint:        "ask for less with --cpus/--memory (an in-process run is held to the host's capacity as `agentbox serve` is)",
		Thresholds:          daemon.Thresholds{WarnPercent: -1, ActPercent: -1},
		Network:             &lazyNetwork{make: makeNetwork},
		ImageVerifyCacheDir: filepath.Join(stateDir, "image-verify"),
		GuestAgentChannel:   lo.GuestAgentChannel,
	})
	if err != nil {
		return err
	}
	h.daemon = d
	h.undo.Add("daemon", d.Shutdown)
	h.undo.Add("sandboxes", h.removeLocalSandboxes)
	// The server's request log would repeat each error the front reports
	// itself: only at debug level is it wanted.
	var srvLog *slog.Logger
	if logger.Enabled(ctx, slog.LevelDebug) {
		srvLog = logger
	}
	if h.server, err = apiserver.NewServer(apiserver.Config{Backend: d, Logger: srvLog}); err != nil {
		return err
	}
	ln := NewListener()
	served := make(chan error, 1)
	go func() { served <- h.server.Serve(ln) }()
	h.undo.Add("API server", func(ctx context.Context) error {
		err := h.server.Shutdown(ctx)
		return errors.Join(err, <-served)
	})
	h.Client = client.New("", client.WithHTTPClient(&http.Client{Transport: &http.Transport{
		DialContext:        ln.DialContext,
		DisableCompression: true,
	}}))
	h.undo.Add("client", func(context.Context) error { h.Client.Close(); return nil })
	return nil
}

// removeLocalSandboxes removes a local host's sandboxes still there
// unless LocalOptions.Keep, and notes whether one is left (kept, or its
// removal failed), so the run's files stay for it.
func (h *Host) removeLocalSandboxes(ctx context.Context) error {
	var err error
	left, lerr := h.daemon.ListSandboxes(ctx, nil, "")
	if !h.o.Local.Keep && lerr == nil {
		for _, sb := range left {
			if rerr := h.daemon.DeleteSandbox(ctx, sb.ID, true); rerr != nil {
				err = errors.Join(err, fmt.Errorf("remove sandbox %s: %w", sb.ID, rerr))
			}
		}
		left, lerr = h.daemon.ListSandboxes(ctx, nil, "")
	}
	h.keepFiles = lerr != nil || len(left) > 0
	return err
}

// Kept says how to reach and remove a sandbox that Host.Keep left
// running after the process.
type Kept struct {
	// Sandbox is the kept sandbox.
	Sandbox api.Sandbox
	// AgentSocket, ConsoleLog and Overlay are its host paths (agent
	// socket, console log, qcow2 overlay).
	AgentSocket, ConsoleLog, Overlay string
	// Inspect is the shell command that shows its domain
	// (virsh dominfo).
	Inspect string
	// Remove is the shell command that destroys its domain and removes
	// the run's state and runtime dirs.
	Remove string
	// MarkErr is why the run could not be marked kept (then the next
	// sweep removes its files while the domain runs); nil when marked.
	MarkErr error
}

// Keep marks a local host's run state kept (no sweep removes it) and
// returns how to reach and remove sb, a sandbox of this host left
// running (by LocalOptions.Keep, whose domains outlive the process). The
// error says that sb's record is gone (then nothing is marked), or that
// the host is not a local one.
func (h *Host) Keep(sb api.Sandbox) (Kept, error) {
	if h.run == nil {
		return Kept{}, errors.New("keep: not a local host")
	}
	rec, err := h.daemon.Record(sb.ID)
	if err != nil {
		return Kept{}, fmt.Errorf("sandbox %s kept running, but its record is gone: %w", sb.ID, err)
	}
	k := Kept{
		Sandbox:     sb,
		AgentSocket: rec.AgentSocket,
		ConsoleLog:  rec.ConsoleLog,
		Overlay:     rec.Overlay,
		Inspect:     fmt.Sprintf("virsh -c %s dominfo %s", h.o.URI, sb.Domain),
		Remove:      fmt.Sprintf("virsh -c %s destroy %s && rm -rf %s %s", h.o.URI, sb.Domain, h.run.Dir, h.run.RuntimeDir),
	}
	if err := h.run.Keep(k.Remove); err != nil {
		k.MarkErr = fmt.Errorf("mark run %s kept: %w", h.run.ID, err)
	}
	return k, nil
}
