// Package sandbox owns the life of sandboxes: it turns an image and a
// resource request into a running domain with its own qcow2 overlay and a
// connected guest agent, and tears all of it down again. It is used by
// `agentbox run` in-process and by the daemon, which adds a durable Store
// and reconciles its records with libvirt after a restart (Reconcile).
//
// This package is the core: Sandbox and its states (transitions checked
// in one place, setState), Record, the sentinel errors, the interfaces of
// what it drives (Driver, Store, NetworkProvider, Limits) and the Manager's
// registry, create, stop and remove. Concerns built on it live in
// sub-packages that use its exported hooks (Build, Step, Hooks) and are
// never imported by it: snapshot (save, restore, delete, records), warm
// (warm templates and the pool) and resources (limit resolution,
// enforcement, usage).
//
// Creation is a list of named steps (build.go: resources → register → dir
// → overlay → prepare → network → domain → agent → guest setup → running;
// prepare and guest setup run the Options' hooks), each of which
// registers its undo in one revert list; a failure at step N says
// "create step <name>: …" and undoes steps N-1…1, so no overlay, domain or
// qemu process outlives an error. A restore runs its own steps on the same
// Build.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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

// SandboxesDir returns the directory under stateDir (Config.StateDir, or
// an in-process run's state dir) that holds one directory per sandbox,
// named by its ID: STATE/sandboxes/ID/overlay.qcow2, console log, ….
func SandboxesDir(stateDir string) string { return filepath.Join(stateDir, "sandboxes") }

// Config configures a Manager.
type Config struct {
	// Driver starts and stops domains. Required.
	Driver Driver
	// Limits resolves and enforces the sandboxes' host-side limits
	// (vmctl/sandbox/resources.New). Required.
	Limits Limits
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
	// QEMUUsers, if set, runs every sandbox's QEMU as a uid of its own
	// from this range (qemuuser.go, docs/security.md); nil runs QEMU as
	// qemu.conf's user. It makes StateDir 0711.
	QEMUUsers *IDRange
	// OnChange, if set, is called after every persisted change of a
	// sandbox's record (state changes, SaveExecAccount), and with removed=true
	// when a sandbox is removed. It runs synchronously: it must not block
	// or call back into the Manager.
	OnChange func(r Record, removed bool)
	// OnAgentViolation, if set, is called once when a sandbox failed
	// because its guest broke the agent protocol (r is its failed record,
	// Reason ReasonProtocolViolation; v wraps
	// agentproto.ErrProtocolViolation and names the frame and the limit),
	// before its domain is destroyed: the daemon audits it. It must not
	// block or call back into the Manager.
	OnAgentViolation func(r Record, v error)
}

// Hooks let the sub-packages take part in the Manager's remove and
// reconcile (see AddHooks). Nil fields are skipped.
type Hooks struct {
	// Removing runs in Remove once sb's domain is gone and before its
	// directory is deleted (snapshots move the overlay that holds them).
	// Its error joins Remove's; the removal goes on.
	Removing func(sb *Sandbox) error
	// Reconciling runs in Reconcile after the records are loaded and
	// before files no record knows are removed; known holds the ID of
	// every record.
	Reconciling func(ctx context.Context, known map[string]bool, rep *Report)
}

// Manager owns the sandboxes' lifecycle: it creates, stops, removes and
// (after a restart) adopts them, keeps them in a registry by ID and name,
// and persists their records. It observes its sandboxes (observer). It is
// safe for concurrent use. Its methods are declared on it and on its
// parts by concern (pauseResume, netAttach, qemuUsers, reconciler), whose
// methods are promoted: all are called on the Manager.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	byID  map[string]*Sandbox
	names map[string]string // name → ID
	hooks []Hooks
	// qemuIDs maps the QEMU uids in use to their sandbox (qemuuser.go).
	qemuIDs map[uint32]string

	// The parts by concern, each a pointer back to this Manager (set by
	// linkedManager): they share its fields and its lock; their methods
	// are promoted.
	pauseResume // pause.go: pause, resume, start and their saved states
	netAttach   // network.go: the sandboxes' networks
	qemuUsers   // qemuuser.go: QEMU's users and the files they own
	reconciler  // reconcile.go: adoption after a restart
}

// linkedManager points m's parts at m and returns it. NewManager links
// every Manager it makes; an unlinked one (a test's literal) has only the
// methods declared on Manager itself.
func linkedManager(m *Manager) *Manager {
	m.pauseResume = pauseResume{m}
	m.netAttach = netAttach{m}
	m.qemuUsers = qemuUsers{m}
	m.reconciler = reconciler{m}
	return m
}

// NewManager checks cfg and returns a Manager with an empty registry (see
// Reconcile to fill it from the Store). It creates StateDir and RuntimeDir
// (mode 0700) if needed.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Driver == nil {
		return nil, fmt.Errorf("%w: sandbox manager needs a driver", ErrInvalid)
	}
	if cfg.Limits == nil {
		return nil, fmt.Errorf("%w: sandbox manager needs Limits (vmctl/sandbox/resources.New)", ErrInvalid)
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
	cfg.Logger = log
	m := linkedManager(&Manager{cfg: cfg, log: log, byID: map[string]*Sandbox{}, names: map[string]string{}})
	if err := m.prepareStateDir(); err != nil {
		return nil, err
	}
	return m, nil
}

// Config returns the manager's configuration (Logger never nil), for the
// sub-packages built on it.
func (m *Manager) Config() Config { return m.cfg }

// AddHooks adds h to the hooks Remove and Reconcile run, in the order
// added. Call it before Reconcile and before sandboxes are made.
func (m *Manager) AddHooks(h Hooks) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hooks = append(m.hooks, h)
}

func (m *Manager) allHooks() []Hooks {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.hooks)
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
	// Template is the name of the daemon's template Image was chosen by,
	// kept as Record.Template; "" for none.
	Template string
	// Tenant is the tenant that owns the sandbox, kept as Record.Tenant;
	// "" for the admin's.
	Tenant string
	// Extra is the sandbox's exec accounting as JSON (ExecAccount.Encode:
	// its limits and creator), kept as Record.Extra; the sandbox counts
	// from it. Empty is the zero account (no limits).
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
	// ResourceRequest and Limits); zero fields take the image's or
	// agentbox's defaults.
	Resources ResourceRequest
	// MemoryBackend, if set, puts the guest RAM in agentbox's own
	// memory backend (domain.MemoryBackend): a warm memory template's
	// build runs with its RAM in a shared file.
	MemoryBackend *domain.MemoryBackend
	// Admit, if set, is called with the sandbox's resolved vCPUs and
	// memory (MiB) and with what the manager's other live sandboxes hold
	// (see Resources), before anything is made; an error aborts the create
	// (admission control). It runs under the manager's lock, so concurrent
	// creates cannot both pass a check that only one fits.
	Admit func(r Resources) error
	// Prepare, if set, runs as the create step "prepare" once the
	// sandbox's directory exists and before its network is set up (the
	// daemon writes the sandbox's secrets there, which its egress proxy
	// reads); what it makes in the directory goes with it on failure.
	Prepare func(ctx context.Context, sb *Sandbox) error
	// GuestReady, if set, runs as the create step "guest setup" once the
	// guest agent answers and before the sandbox is running, with the
	// agent's connection (the daemon installs the sandbox's CA there).
	GuestReady func(ctx context.Context, c *agent.Client) error
}

// Create boots a new sandbox: a fresh ID, a qcow2 overlay over the image's
// base disk, a transient domain, and a connected guest agent. The sandbox
// is in the registry (state creating) from the start and running when
// Create returns. If the guest dies first, the error wraps ErrGuestDied
// and carries the console's last lines. A failed step's error says
// "create step <name>: …"; everything made so far is removed, the record
// included.
func (m *Manager) Create(ctx context.Context, opts Options) (*Sandbox, error) {
	if opts.Image == nil {
		return nil, fmt.Errorf("%w: no image", ErrInvalid)
	}
	if opts.Accel.DomainType == "" {
		return nil, fmt.Errorf("%w: no accelerator chosen", ErrInvalid)
	}
	if opts.VCPUs < 0 || opts.VCPUs > 255 {
		return nil, fmt.Errorf("%w: %d vCPUs: want 1..255", ErrInvalid, opts.VCPUs)
	}
	res := opts.Image.Manifest.Resources
	b, err := m.NewBuild(Shape{
		Image: opts.Image, Accel: opts.Accel,
		VCPUs: pick(opts.VCPUs, res.VCPUs), MemoryMiB: pick(opts.MemoryMiB, res.MemoryMiB),
		GuestAgentChannel: opts.GuestAgentChannel,
	})
	if err != nil {
		return nil, err
	}
	sb := b.Sandbox
	b.Spec = domain.Spec{
		Name:        sb.Domain,
		SandboxID:   sb.ID,
		Image:       opts.Image.Digest,
		Owner:       m.cfg.Owner,
		Type:        domain.Type(opts.Accel.DomainType),
		VCPUs:       uint(sb.VCPUs),
		MemoryMiB:   uint64(sb.Memory),
		Kernel:      opts.Image.Kernel,
		Initrd:      opts.Image.Initrd,
		Cmdline:     opts.Image.Manifest.Cmdline + " agentbox.port=" + opts.Image.Manifest.AgentPort + " agentbox.hostname=" + sb.Domain,
		Disk:        sb.Overlay,
		DiskBacking: opts.Image.Disk,
		AgentSocket: sb.AgentSocket,
		AgentPort:   opts.Image.Manifest.AgentPort,
		ConsoleLog:  sb.ConsoleLog,

		GuestAgentSocket: sb.GuestAgentSocket,
		// A new VM generation ID for every domain: restores of a
		// snapshot of this sandbox reseed their guest's RNG at once.
		GenID: true,

		MemoryBackend: opts.MemoryBackend,
	}
	bootTimeout := opts.BootTimeout
	if bootTimeout <= 0 {
		bootTimeout = 120 * time.Second
	}
	log := m.log.With("sandbox", sb.ID, "domain", sb.Domain, "image", opts.Image.Manifest.Name)
	err = b.Run(ctx, "create",
		// The host-side limits, resolved and checked before anything is made.
		Step{Name: "resources", Run: func(ctx context.Context, b *Build) error {
			lim, err := m.cfg.Limits.Resolve(ctx, b.Sandbox, opts)
			if err != nil {
				return err
			}
			b.Sandbox.setResources(lim)
			return nil
		}},
		// The registry entry (name reserved, admission checked) and the
		// durable record, so a daemon killed from here on finds it.
		StepRegister(Admission{Name: opts.Name, Labels: opts.Labels, Template: opts.Template, Tenant: opts.Tenant, Extra: opts.Extra, Admit: opts.Admit}),
		StepDir(),
		Step{Name: "overlay", Run: func(ctx context.Context, b *Build) error {
			return overlay.Create(ctx, opts.Image.Disk, sb.Overlay, overlay.Options{SizeBytes: sb.diskBytes()})
		}},
		Step{Name: "prepare", Run: func(ctx context.Context, b *Build) error {
			if opts.Prepare == nil {
				return nil
			}
			return opts.Prepare(ctx, b.Sandbox)
		}},
		StepNetwork(opts.Network),
		// Watched before it starts, so an early crash is seen.
		StepDomain(m.cfg.Driver.StartDomain),
		// The guest agent's handshake, raced against the guest's death.
		StepAgent(bootTimeout),
		Step{Name: "guest setup", Run: func(ctx context.Context, b *Build) error {
			if opts.GuestReady == nil {
				return nil
			}
			return opts.GuestReady(ctx, b.Agent)
		}},
		StepRunning(),
	)
	if err != nil {
		return nil, err
	}
	b.Done()
	log.Debug("agent ready", "accel", opts.Accel.Accel, "vcpus", sb.VCPUs, "memory_mib", sb.Memory, "boot_ms", sb.BootTime.Milliseconds())
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
	sb.mu.Lock()
	sb.stopWatch = stopWatch
	sb.mu.Unlock()
	go sb.watch(stops, sb.curLife())
	return nil
}

// register adds sb to the registry, reserving its name, after admit (if
// any) accepted its resources.
func (m *Manager) register(sb *Sandbox, admit func(Resources) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sb.Name != "" {
		if other, ok := m.names[sb.Name]; ok {
			// Names are one namespace for all tenants; another tenant's
			// sandbox is not named (its id would leak past the 404s).
			if o := m.byID[other]; o != nil && o.Tenant() != sb.Tenant() {
				return fmt.Errorf("%w: the name %q is taken: choose another name", ErrNameTaken, sb.Name)
			}
			return fmt.Errorf("%w: sandbox %s already has the name %q: choose another name or remove it", ErrNameTaken, other, sb.Name)
		}
	}
	if admit != nil {
		r := m.requestLocked(sb) // sharedmem.go
		if err := admit(r); err != nil {
			return err
		}
	}
	if err := m.assignQEMUUserLocked(sb); err != nil { // qemuuser.go
		return err
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
	m.releaseQEMUUserLocked(sb)
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

// observer is how the Manager observes the sandboxes it makes: it
// persists their records and passes them on to Config.OnChange, and takes
// a stopped domain's network down.
type observer struct{ m *Manager }

// Changed is called after every change of sb's record (state, extra
// data), one call at a time per sandbox, never after the sandbox was
// removed; r is the new record. It stores r and tells Config.OnChange. A
// store error is logged: the in-memory state stays authoritative until
// the next write.
func (o observer) Changed(sb *Sandbox, r Record) {
	if err := o.m.store(r); err != nil {
		o.m.log.Error("persist sandbox record", "sandbox", r.ID, "err", err)
	}
	if o.m.cfg.OnChange != nil {
		o.m.cfg.OnChange(r, false)
	}
}

// DomainGone is called once when sb's domain stopped on its own or was
// destroyed (crash, poweroff, stop); it takes the sandbox's network down.
func (o observer) DomainGone(sb *Sandbox) { o.m.teardownNetwork(context.Background(), sb) }

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
		if c := a.created().Compare(b.created()); c != 0 {
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
	// SharedMiB is the part of MemoryMiB that UsedMemoryMiB already
	// counts: the new sandbox is a clone of a memory template that a live
	// clone maps too (SharedMemory), and the template's RAM is counted
	// once. Admission commits MemoryMiB − SharedMiB for the new sandbox.
	SharedMiB int
	// UsedVCPUs and UsedMemoryMiB sum the sandboxes that are creating,
	// running, paused in memory or stopping, or being resumed or started
	// (MiB); a sandbox paused to disk holds nothing. A clone of a memory
	// template counts its guest RAM minus its SharedMemory.MiB, and each
	// template with live clones counts the largest of those once.
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
	var live []*Sandbox
	for _, sb := range m.byID {
		if sb.holdsResources() {
			r.UsedVCPUs += sb.VCPUs
			live = append(live, sb)
		}
	}
	r.UsedMemoryMiB = memoryCommit(live) // sharedmem.go
	return r
}

// Stop powers the sandbox's domain off at once (libvirt destroy: a power
// cut; the guest's disk is the throw-away overlay) and keeps the record,
// overlay and console log until Remove or Start. A paused sandbox stops
// too (paused to disk, its saved state is dropped). Stopping a stopped or
// failed sandbox is a no-op; a sandbox still being created fails with
// ErrConflict.
func (m *Manager) Stop(ctx context.Context, sb *Sandbox, reason string) error {
	ctx = context.WithoutCancel(ctx)
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	paused := sb.Record().Paused
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
	m.cfg.Limits.Release(sb)
	if err != nil {
		sb.setState(StateFailed, "stop: "+err.Error())
		return fmt.Errorf("destroy domain %s: %w", sb.Domain, err)
	}
	sb.unwatch()
	m.teardownNetwork(ctx, sb)
	m.dropSavedState(ctx, sb, paused)
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
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	paused := sb.Record().Paused
	if !force && !sb.State().Final() {
		return fmt.Errorf("%w: sandbox %s is %s: stop it first or remove it with force (agentbox rm -f; DELETE /v1/sandboxes/{id}?force=true)", ErrRunning, sb.ID, sb.State())
	}
	var errs []error
	if st := sb.State(); st == StateRunning || st == StatePaused {
		// Own the stop, so the watch does not report the destroy as a
		// failure.
		sb.setState(StateStopping, "removing")
	}
	sb.release()
	if err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain); err != nil {
		errs = append(errs, fmt.Errorf("destroy domain %s: %w", sb.Domain, err))
	}
	m.cfg.Limits.Release(sb)
	sb.unwatch()
	m.teardownNetwork(ctx, sb)
	m.dropSavedState(ctx, sb, paused) // its overlay may be kept for snapshots
	sb.mu.Lock()
	if !sb.rec.State.Final() {
		sb.rec.State, sb.rec.Reason, sb.rec.StoppedAt = StateStopped, "removed", time.Now().UTC()
	}
	rec := sb.rec
	sb.mu.Unlock()
	for _, h := range m.allHooks() {
		if h.Removing != nil {
			if err := h.Removing(sb); err != nil { // e.g. snapshots outlive their sandbox
				errs = append(errs, err)
			}
		}
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

// NewID returns a new sandbox or snapshot ID: 12 random lowercase hex
// digits.
func NewID() (string, error) {
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
