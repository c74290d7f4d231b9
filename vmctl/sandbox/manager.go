// Package sandbox owns the life of sandboxes: it turns an image and a
// resource request into a running domain with its own qcow2 overlay and a
// connected guest agent, and tears all of it down again. It is used by
// `agentbox run` in-process and by the daemon, which adds a durable Store
// and reconciles its records with libvirt after a restart (Reconcile).
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
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
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
	// Store keeps the sandboxes' records across restarts (the daemon's
	// bbolt store); nil keeps them in memory only.
	Store Store
	// Owner is written into every domain's metadata (domain.Metadata.Owner)
	// and limits Reconcile to the domains carrying it: the daemon's store
	// instance id. Empty for in-process use (`agentbox run`).
	Owner string
	// Network gives sandboxes with a network policy other than none their
	// network (vmctl/network.Manager); nil: only mode none is possible.
	Network NetworkProvider
	// OnChange, if set, is called after every persisted change of a
	// sandbox's record (state changes, SetExtra), and with removed=true
	// when a sandbox is removed. It runs synchronously: it must not block
	// or call back into the Manager.
	OnChange func(r Record, removed bool)
}

// Manager owns the sandboxes' lifecycle: it creates, stops, removes and
// (after a restart) adopts them, keeps them in a registry by ID and name,
// and persists their records. It is safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	byID  map[string]*Sandbox
	names map[string]string // name → ID

	snap snapState // snapshots (snapshot.go)
}

// NewManager checks cfg and returns a Manager with an empty registry (see
// Reconcile to fill it from the Store). It creates StateDir and RuntimeDir
// (mode 0700) if needed.
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
	return &Manager{cfg: cfg, log: log, byID: map[string]*Sandbox{}, names: map[string]string{}}, nil
}

// Options describe the sandbox to create.
type Options struct {
	// Image is the loaded image to boot. Required.
	Image *image.Image
	// Accel is the chosen accelerator (see vmctl/accel). Required.
	Accel accel.Choice
	// Name is an optional unique name (the caller checks its syntax); a
	// name in use fails with ErrNameTaken.
	Name string
	// Labels are kept with the sandbox.
	Labels map[string]string
	// Extra is opaque data kept with the record (Record.Extra).
	Extra []byte
	// VCPUs and MemoryMiB override the image's defaults when > 0.
	VCPUs     int
	MemoryMiB int
	// BootTimeout bounds the time from domain start to the agent's
	// handshake; 0 means 120 s (TCG on a loaded 2-core host is slow).
	BootTimeout time.Duration
	// Network is the sandbox's network policy; the zero value is mode
	// none (no network device at all).
	Network netpolicy.Policy
	// GuestAgentChannel adds QEMU's own guest agent channel
	// (org.qemu.guest_agent.0), for benchmarks against qemu-ga.
	GuestAgentChannel bool
	// Resources are the disk size and host-side limits (see
	// ResourceRequest and resources.go); zero fields take the image's or
	// agentbox's defaults.
	Resources ResourceRequest
	// Admit, if set, is called with the sandbox's resolved vCPUs and
	// memory (MiB) and with what the manager's other live sandboxes hold
	// (see Resources), before anything is made; an error aborts the create
	// (admission control). It runs under the manager's lock, so concurrent
	// creates cannot both pass a check that only one fits.
	Admit func(r Resources) error
}

// Create boots a new sandbox: a fresh ID, a qcow2 overlay over the image's
// base disk, a transient domain, and a connected guest agent. The sandbox
// is in the registry (state creating) from the start and running when
// Create returns. If the guest dies first, the error wraps ErrGuestDied
// and carries the console's last lines. On any error everything made so
// far is removed, the record included.
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
	id, err := newID()
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{
		ID:      id,
		Name:    opts.Name,
		Labels:  maps.Clone(opts.Labels),
		Domain:  DomainPrefix + id,
		Dir:     filepath.Join(m.cfg.StateDir, "sandboxes", id),
		Image:   opts.Image,
		Accel:   opts.Accel,
		VCPUs:   pick(opts.VCPUs, opts.Image.Manifest.Resources.VCPUs),
		Memory:  pick(opts.MemoryMiB, opts.Image.Manifest.Resources.MemoryMiB),
		mgr:     m,
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
	sb.rec = Record{
		ID: id, Name: opts.Name, State: StateCreating, Domain: sb.Domain,
		ImageName: opts.Image.Manifest.Name, ImageDigest: opts.Image.Digest, ImageDir: opts.Image.Dir,
		Accel: string(opts.Accel.Accel), DomainType: opts.Accel.DomainType,
		VCPUs: sb.VCPUs, MemoryMiB: sb.Memory, Labels: sb.Labels,
		Dir: sb.Dir, Overlay: sb.Overlay, ConsoleLog: sb.ConsoleLog, AgentSocket: sb.AgentSocket,
		CreatedAt: time.Now().UTC(), Extra: append([]byte(nil), opts.Extra...),
	}
	log := m.log.With("sandbox", id, "domain", sb.Domain, "image", opts.Image.Manifest.Name)

	if err := m.prepareResources(ctx, sb, opts); err != nil {
		return nil, err
	}
	var undo revert
	defer func() {
		if err != nil {
			if rerr := undo.run(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()

	// Step 1: the registry entry (name reserved, admission checked) and
	// the durable record, so a daemon killed from here on finds it.
	if err := m.register(sb, opts.Admit); err != nil {
		return nil, err
	}
	undo.add("registry", func(context.Context) error { m.unregister(sb); return nil })
	if err := m.store(sb.Record()); err != nil {
		return nil, err
	}
	undo.add("record", func(context.Context) error { return m.unstore(sb.ID) })

	// Step 2: the sandbox directory and its overlay.
	if err := os.MkdirAll(filepath.Dir(sb.Dir), 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	if err := os.Mkdir(sb.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox dir: %w", err)
	}
	undo.add("sandbox dir", func(context.Context) error { return os.RemoveAll(sb.Dir) })
	if err := overlay.Create(ctx, opts.Image.Disk, sb.Overlay, overlay.Options{SizeBytes: sb.diskBytes()}); err != nil {
		return nil, fmt.Errorf("create overlay: %w", err)
	}

	// Step 3: the domain. Watch before starting so an early crash is seen.
	spec := domain.Spec{
		Name:        sb.Domain,
		SandboxID:   id,
		Image:       opts.Image.Digest,
		Owner:       m.cfg.Owner,
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
	spec.Tune = m.tune(sb, spec.Type)
	if err := m.attachNetwork(ctx, sb, opts.Network, &spec, &undo); err != nil {
		return nil, err
	}
	if err := m.watch(sb); err != nil {
		return nil, err
	}
	undo.add("domain watch", func(context.Context) error { sb.stopWatch(); return nil })
	sb.setSpec(spec) // for snapshots of this sandbox (snapshot.go)
	start := time.Now()
	if err := m.startDomain(ctx, sb, spec); err != nil {
		return nil, fmt.Errorf("start domain: %w", err)
	}
	undo.add("domain", func(ctx context.Context) error {
		err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
		removeFiles(sb.AgentSocket, sb.GuestAgentSocket)
		sb.releaseResources()
		return err
	})
	m.applyResources(ctx, sb)
	log.Debug("domain started", "accel", opts.Accel.Accel, "vcpus", sb.VCPUs, "memory_mib", sb.Memory)

	// Step 4: the guest agent's handshake, raced against the guest's death.
	bootTimeout := opts.BootTimeout
	if bootTimeout <= 0 {
		bootTimeout = 120 * time.Second
	}
	client, err := sb.connectAgent(ctx, bootTimeout)
	if err != nil {
		return nil, err
	}
	sb.BootTime = time.Since(start)
	sb.mu.Lock()
	sb.agent = client
	sb.rec.BootMs = sb.BootTime.Milliseconds()
	sb.mu.Unlock()
	if err := sb.setState(StateRunning, ""); err != nil {
		client.Close()
		return nil, err
	}
	undo.release()
	log.Debug("agent ready", "boot_ms", sb.BootTime.Milliseconds())
	return sb, nil
}

// watch subscribes to the domain's stop and starts sb's watcher.
func (m *Manager) watch(sb *Sandbox) error {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	stops, err := m.cfg.Driver.WatchStop(watchCtx, sb.Domain)
	if err != nil {
		stopWatch()
		return fmt.Errorf("watch domain: %w", err)
	}
	sb.stopWatch = stopWatch
	go sb.watch(stops)
	return nil
}

// register adds sb to the registry, reserving its name, after admit (if
// any) accepted its resources.
func (m *Manager) register(sb *Sandbox, admit func(Resources) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb.Name != "" {
		if other, ok := m.names[sb.Name]; ok {
			return fmt.Errorf("%w: sandbox %s already has the name %q: choose another name or remove it", ErrNameTaken, other, sb.Name)
		}
	}
	if admit != nil {
		r := m.resourcesLocked()
		r.VCPUs, r.MemoryMiB = sb.VCPUs, sb.Memory
		if err := admit(r); err != nil {
			return err
		}
	}
	m.byID[sb.ID] = sb
	if sb.Name != "" {
		m.names[sb.Name] = sb.ID
	}
	return nil
}

func (m *Manager) unregister(sb *Sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.byID, sb.ID)
	if sb.Name != "" && m.names[sb.Name] == sb.ID {
		delete(m.names, sb.Name)
	}
}

// store writes r to the Store (if any).
func (m *Manager) store(r Record) error {
	if m.cfg.Store == nil {
		return nil
	}
	if err := m.cfg.Store.PutSandbox(r); err != nil {
		return fmt.Errorf("save sandbox %s: %w", r.ID, err)
	}
	return nil
}

func (m *Manager) unstore(id string) error {
	if m.cfg.Store == nil {
		return nil
	}
	return m.cfg.Store.DeleteSandbox(id)
}

// persist stores r after a change and tells the observer. A store error
// is logged: the in-memory state stays authoritative until the next write.
func (m *Manager) persist(r Record) {
	if err := m.store(r); err != nil {
		m.log.Error("persist sandbox record", "sandbox", r.ID, "err", err)
	}
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(r, false)
	}
}

// Get returns the sandbox with the given ID or name. Errors: ErrNotFound.
func (m *Manager) Get(ref string) (*Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb, ok := m.byID[ref]; ok {
		return sb, nil
	}
	if id, ok := m.names[ref]; ok {
		return m.byID[id], nil
	}
	return nil, fmt.Errorf("%w: no sandbox %q: `agentbox ls` lists them", ErrNotFound, ref)
}

// List returns all sandboxes, oldest first.
func (m *Manager) List() []*Sandbox {
	m.mu.Lock()
	out := make([]*Sandbox, 0, len(m.byID))
	for _, sb := range m.byID {
		out = append(out, sb)
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b *Sandbox) int {
		if c := a.rec.CreatedAt.Compare(b.rec.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Resources is what a create asks for and what live sandboxes hold.
type Resources struct {
	// VCPUs and MemoryMiB are the new sandbox's resources (MiB).
	VCPUs, MemoryMiB int
	// UsedVCPUs and UsedMemoryMiB sum the sandboxes that are creating,
	// running or stopping (MiB).
	UsedVCPUs, UsedMemoryMiB int
}

// Resources returns what live sandboxes (creating, running, stopping)
// hold; VCPUs and MemoryMiB are zero.
func (m *Manager) Resources() Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.resourcesLocked()
}

func (m *Manager) resourcesLocked() Resources {
	var r Resources
	for _, sb := range m.byID {
		if !sb.State().Final() {
			r.UsedVCPUs += sb.VCPUs
			r.UsedMemoryMiB += sb.Memory
		}
	}
	return r
}

// Stop powers the sandbox's domain off at once (libvirt destroy: a power
// cut; the guest's disk is the throw-away overlay) and keeps the record,
// overlay and console log until Remove. Stopping a stopped or failed
// sandbox is a no-op; a sandbox still being created fails with
// ErrConflict.
func (m *Manager) Stop(ctx context.Context, sb *Sandbox, reason string) error {
	ctx = context.WithoutCancel(ctx)
	switch st := sb.State(); {
	case st.Final():
		return nil
	case st == StateCreating:
		return fmt.Errorf("%w: sandbox %s is still being created: wait for it to run, then stop it", ErrConflict, sb.ID)
	}
	if err := sb.setState(StateStopping, reason); err != nil {
		if sb.State().Final() {
			return nil // it stopped on its own meanwhile
		}
		return err
	}
	sb.release()
	err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
	sb.releaseResources()
	if err != nil {
		sb.setState(StateFailed, "stop: "+err.Error())
		return fmt.Errorf("destroy domain %s: %w", sb.Domain, err)
	}
	sb.stopWatch()
	m.teardownNetwork(ctx, sb)
	sb.setState(StateStopped, reason)
	m.log.Debug("sandbox stopped", "sandbox", sb.ID, "domain", sb.Domain, "reason", reason)
	return nil
}

// Remove deletes a sandbox: the domain (if it still runs: only with force,
// else ErrRunning), the agent connection, sockets, overlay, sandbox
// directory and record. It runs to the end even if ctx is cancelled, and
// joins the errors of its steps.
func (m *Manager) Remove(ctx context.Context, sb *Sandbox, force bool) error {
	ctx = context.WithoutCancel(ctx)
	if !force && !sb.State().Final() {
		return fmt.Errorf("%w: sandbox %s is %s: stop it first or remove it with force (agentbox rm -f; DELETE /v1/sandboxes/{id}?force=true)", ErrRunning, sb.ID, sb.State())
	}
	var errs []error
	if sb.State() == StateRunning {
		// Own the stop, so the watch does not report the destroy as a
		// failure.
		sb.setState(StateStopping, "removing")
	}
	sb.release()
	if err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain); err != nil {
		errs = append(errs, fmt.Errorf("destroy domain %s: %w", sb.Domain, err))
	}
	sb.releaseResources()
	if sb.stopWatch != nil {
		sb.stopWatch()
	}
	m.teardownNetwork(ctx, sb)
	sb.mu.Lock()
	if !sb.rec.State.Final() {
		sb.rec.State, sb.rec.Reason, sb.rec.StoppedAt = StateStopped, "removed", time.Now().UTC()
	}
	rec := sb.rec
	sb.mu.Unlock()
	if err := m.keepSnapshotFile(sb); err != nil { // snapshots outlive their sandbox
		errs = append(errs, err)
	}
	if err := os.RemoveAll(sb.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
	}
	sb.pmu.Lock()
	sb.removed = true
	sb.pmu.Unlock()
	if err := m.unstore(sb.ID); err != nil {
		errs = append(errs, fmt.Errorf("delete sandbox record: %w", err))
	}
	m.unregister(sb)
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(rec, true)
	}
	m.log.Debug("sandbox removed", "sandbox", sb.ID, "domain", sb.Domain)
	return errors.Join(errs...)
}

// Destroy is Remove with force: what `agentbox run` does at its end.
func (m *Manager) Destroy(ctx context.Context, sb *Sandbox) error {
	return m.Remove(ctx, sb, true)
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
		select {
		case <-sb.stopped:
			return nil, sb.StopErr()
		case <-time.After(stopEventGrace):
			return nil, fmt.Errorf("guest agent handshake: %w", r.err)
		}
	case <-sb.stopped:
		cancel()
		if r := <-done; r.c != nil {
			r.c.Close()
		}
		return nil, sb.StopErr()
	}
}

func newID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// removeFiles removes the given paths, ignoring empty ones and missing
// files.
func removeFiles(paths ...string) {
	for _, p := range paths {
		if p != "" {
			os.Remove(p)
		}
	}
}

func pick(override, def int) int {
	if override > 0 {
		return override
	}
	return def
}
