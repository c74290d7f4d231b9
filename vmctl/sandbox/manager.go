// Package sandbox owns the life of sandboxes: it turns an image and a
// resource request into a running domain with its own qcow2 overlay and a
// connected guest agent, and tears all of it down again. It is used by
// `agentbox run` in-process (and later by the daemon).
//
// Creation is a list of named steps (overlay → domain → agent), each of which
// registers its undo; a failure at step N undoes steps N-1…1, so no overlay,
// domain or qemu process outlives an error.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
)

// DomainPrefix starts the name of every domain agentbox creates; the rest is
// the sandbox ID.
const DomainPrefix = "agentbox-"

// Config configures a Manager.
type Config struct {
	// Driver starts and stops domains. Required.
	Driver Driver
	// StateDir holds one directory per sandbox (overlay, console log), e.g.
	// /var/lib/agentbox. Required, absolute.
	StateDir string
	// RuntimeDir holds the agent's unix sockets, e.g. /run/agentbox. A unix
	// socket path is limited to 107 bytes, so keep it short. Required.
	RuntimeDir string
	// Logger receives structured logs (keys: sandbox, domain, image). Nil
	// discards them.
	Logger *slog.Logger
}

// Manager creates and destroys sandboxes. It is safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger
}

// NewManager checks cfg and returns a Manager. It creates StateDir and
// RuntimeDir (mode 0700) if needed.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Driver == nil {
		return nil, fmt.Errorf("%w: sandbox manager needs a driver", ErrInvalid)
	}
	for name, dir := range map[string]string{"state dir": cfg.StateDir, "runtime dir": cfg.RuntimeDir} {
		if dir == "" || !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("%w: %s %q must be an absolute path", ErrInvalid, name, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{cfg: cfg, log: log}, nil
}

// Options describe the sandbox to create.
type Options struct {
	// Image is the loaded image to boot. Required.
	Image *image.Image
	// Accel is the chosen accelerator (see vmctl/accel). Required.
	Accel accel.Choice
	// VCPUs and MemoryMiB override the image's defaults when > 0.
	VCPUs     int
	MemoryMiB int
	// BootTimeout bounds the time from domain start to the agent's
	// handshake; 0 means 120 s (TCG on a loaded 2-core host is slow).
	BootTimeout time.Duration
	// GuestAgentChannel adds QEMU's own guest agent channel
	// (org.qemu.guest_agent.0), for benchmarks against qemu-ga.
	GuestAgentChannel bool
}

// Create boots a new sandbox: a fresh ID, a qcow2 overlay over the image's
// base disk, a transient domain, and a connected guest agent. It returns
// once the agent has answered the handshake. If the guest dies first, the
// error wraps ErrGuestDied and carries the console's last lines. On any error
// everything made so far is removed.
func (m *Manager) Create(ctx context.Context, opts Options) (_ *Sandbox, err error) {
	if opts.Image == nil {
		return nil, fmt.Errorf("%w: no image", ErrInvalid)
	}
	if opts.Accel.DomainType == "" {
		return nil, fmt.Errorf("%w: no accelerator chosen", ErrInvalid)
	}
	if opts.VCPUs < 0 || opts.VCPUs > 255 {
		return nil, fmt.Errorf("%w: %d vCPUs: want 1..255", ErrInvalid, opts.VCPUs)
	}
	if opts.MemoryMiB != 0 && opts.MemoryMiB < 64 {
		return nil, fmt.Errorf("%w: memory %d MiB: want at least 64 MiB", ErrInvalid, opts.MemoryMiB)
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{
		ID:      id,
		Domain:  DomainPrefix + id,
		Dir:     filepath.Join(m.cfg.StateDir, "sandboxes", id),
		Image:   opts.Image,
		Accel:   opts.Accel,
		VCPUs:   pick(opts.VCPUs, opts.Image.Manifest.Resources.VCPUs),
		Memory:  pick(opts.MemoryMiB, opts.Image.Manifest.Resources.MemoryMiB),
		stopped: make(chan struct{}),
	}
	sb.Overlay = filepath.Join(sb.Dir, "overlay.qcow2")
	sb.ConsoleLog = filepath.Join(sb.Dir, "console.log")
	sb.AgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".sock")
	if opts.GuestAgentChannel {
		sb.GuestAgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".qga.sock")
	}
	if len(sb.AgentSocket) > 100 {
		return nil, fmt.Errorf("%w: runtime dir %s is too long for a unix socket path (max ~100 bytes): choose a shorter --runtime-dir", ErrInvalid, m.cfg.RuntimeDir)
	}
	log := m.log.With("sandbox", id, "domain", sb.Domain, "image", opts.Image.Manifest.Name)

	var undo revert
	defer func() {
		if err != nil {
			if rerr := undo.run(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()

	// Step 1: the sandbox directory and its overlay.
	if err := os.MkdirAll(filepath.Dir(sb.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Mkdir(sb.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	undo.add("sandbox dir", func(context.Context) error { return os.RemoveAll(sb.Dir) })
	if err := overlay.Create(ctx, opts.Image.Disk, sb.Overlay, overlay.Options{}); err != nil {
		return nil, fmt.Errorf("create overlay: %w", err)
	}

	// Step 2: the domain. Watch before starting so an early crash is seen.
	spec := domain.Spec{
		Name:        sb.Domain,
		SandboxID:   id,
		Image:       opts.Image.Digest,
		Type:        domain.Type(opts.Accel.DomainType),
		VCPUs:       uint(sb.VCPUs),
		MemoryMiB:   uint64(sb.Memory),
		Kernel:      opts.Image.Kernel,
		Initrd:      opts.Image.Initrd,
		Cmdline:     opts.Image.Manifest.Cmdline + " agentbox.port=" + opts.Image.Manifest.AgentPort + " agentbox.hostname=" + sb.Domain,
		Disk:        sb.Overlay,
		AgentSocket: sb.AgentSocket,
		AgentPort:   opts.Image.Manifest.AgentPort,
		ConsoleLog:  sb.ConsoleLog,

		GuestAgentSocket: sb.GuestAgentSocket,
	}
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	stops, err := m.cfg.Driver.WatchStop(watchCtx, sb.Domain)
	if err != nil {
		stopWatch()
		return nil, fmt.Errorf("watch domain: %w", err)
	}
	sb.stopWatch = stopWatch
	undo.add("domain watch", func(context.Context) error { stopWatch(); return nil })
	start := time.Now()
	if err := m.cfg.Driver.StartDomain(ctx, spec); err != nil {
		return nil, fmt.Errorf("start domain: %w", err)
	}
	undo.add("domain", func(ctx context.Context) error {
		err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
		os.Remove(sb.AgentSocket)
		if sb.GuestAgentSocket != "" {
			os.Remove(sb.GuestAgentSocket)
		}
		return err
	})
	go sb.watch(stops)
	log.Debug("domain started", "accel", opts.Accel.Accel, "vcpus", sb.VCPUs, "memory_mib", sb.Memory)

	// Step 3: the guest agent's handshake, raced against the guest's death.
	bootTimeout := opts.BootTimeout
	if bootTimeout <= 0 {
		bootTimeout = 120 * time.Second
	}
	client, err := sb.connectAgent(ctx, bootTimeout)
	if err != nil {
		return nil, err
	}
	sb.agent = client
	sb.BootTime = time.Since(start)
	undo.release()
	log.Debug("agent ready", "boot_ms", sb.BootTime.Milliseconds())
	return sb, nil
}

// connectAgent dials the agent socket and runs the handshake, failing early
// when the domain stops and after timeout.
func (sb *Sandbox) connectAgent(ctx context.Context, timeout time.Duration) (*agent.Client, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		c   *agent.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "unix", sb.AgentSocket)
		if err != nil {
			done <- result{nil, fmt.Errorf("connect to agent socket: %w", err)}
			return
		}
		c, err := agent.Dial(ctx, conn, agent.Options{})
		if err != nil {
			conn.Close()
		}
		done <- result{c, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			return r.c, nil
		}
		if ctx.Err() == context.DeadlineExceeded {
			return nil, fmt.Errorf("%w: guest agent did not answer within %s (a TCG boot takes seconds: raise --boot-timeout if the host is busy); console:\n%s", ErrBootTimeout, timeout, ConsoleTail(sb.ConsoleLog, 20))
		}
		// A connection that breaks during boot usually means QEMU exited:
		// give the lifecycle event a moment so the error says why.
		return nil, sb.explain(fmt.Errorf("guest agent handshake: %w", r.err))
	case <-sb.stopped:
		cancel()
		if r := <-done; r.c != nil {
			r.c.Close()
		}
		return nil, sb.StopErr()
	}
}

// Destroy tears a sandbox down: closes the agent connection, destroys the
// domain, removes the overlay, the sockets and the sandbox directory. It runs
// to the end even if ctx is cancelled, and joins the errors of its steps.
func (m *Manager) Destroy(ctx context.Context, sb *Sandbox) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if sb.agent != nil {
		sb.agent.Close()
	}
	if err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain); err != nil {
		errs = append(errs, fmt.Errorf("destroy domain %s: %w", sb.Domain, err))
	}
	if sb.stopWatch != nil {
		sb.stopWatch()
	}
	for _, p := range []string{sb.AgentSocket, sb.GuestAgentSocket} {
		if p != "" {
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(sb.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
	}
	m.log.Debug("sandbox destroyed", "sandbox", sb.ID, "domain", sb.Domain)
	return errors.Join(errs...)
}

func newID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func pick(override, def int) int {
	if override > 0 {
		return override
	}
	return def
}
