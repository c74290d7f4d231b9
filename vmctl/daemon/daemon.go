// Package daemon is agentbox's service core, behind `agentbox serve`: it
// implements the backend contract (vmctl/backend) on the sandbox manager
// (vmctl/sandbox) with a durable store (vmctl/store), an audit log
// (vmctl/audit), tables of detached processes (vmctl/process), admission
// control against the host's capacity, TTL and idle reaping, and
// Prometheus metrics. HTTP and listeners are vmctl/apiserver's, secrets
// vmctl/auth's, the assembly and start-up vmctl/host's, signals
// cmd/agentbox's. vmctl/daemon/DESIGN.md says which room holds what.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/revert"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/sandbox/warm"
	"github.com/agentbox/agentbox/vmctl/store"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Config configures a Daemon.
type Config struct {
	// Driver starts and stops domains (libvirt.NewDriver). Required.
	Driver sandbox.Driver
	// StateDir holds the store (state.db), the audit log (audit/) and the
	// sandboxes' directories. Required, absolute.
	StateDir string
	// RuntimeDir holds the agents' unix sockets. Required, absolute.
	RuntimeDir string
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Version is reported by Info.
	Version string
	// Accel chooses the accelerator for a create's "accel" (auto, kvm,
	// tcg); nil means accel.Choose(mode, nil).
	Accel func(mode accel.Mode) (accel.Choice, error)
	// CapacityMemoryMiB and CapacityVCPUs are what the daemon may commit
	// to sandboxes in total; creates beyond them get 429. Zero means the
	// defaults: the host's memory minus 1 GiB (at least half of it) and
	// 4 vCPUs per host CPU (admission.go).
	CapacityMemoryMiB int
	CapacityVCPUs     int
	// CapacityHint ends the message of a create refused for capacity: what
	// the caller can do. Empty means the daemon's: "remove sandboxes, ask
	// for less, or raise --capacity-memory/--capacity-vcpus".
	CapacityHint string
	// Defaults are the limits of sandboxes whose create request leaves
	// them zero.
	Defaults api.Limits
	// StopOnShutdown stops every running sandbox on Shutdown; by default
	// they keep running and the next daemon adopts them.
	StopOnShutdown bool
	// WarmPool is the number of sandboxes per warm template kept restored
	// and paused for `create --warm` (warm.Service.SetPool); 0
	// keeps none. They are destroyed on Shutdown.
	WarmPool int
	// WarmTemplates caps the warm templates kept in STATE_DIR/warm; the
	// least recently used goes when another is built
	// (warm.Service.SetTemplates); 0 means 8.
	WarmTemplates int
	// WarmMode is how warm templates are made (warm.Service.SetMode):
	// warm.ModeMemory (the default, "") or warm.ModeSnapshot.
	WarmMode warm.Mode
	// AuditMaxBytes and AuditMaxFiles rotate the audit log (0: the audit
	// package's defaults, 64 MiB × 10 files).
	AuditMaxBytes int64
	AuditMaxFiles int
	// AuditFullTty keeps all the keys typed into a terminal session in its
	// audit entry (up to audit.TtyMaxBytes) instead of the first KiB
	// (`agentbox serve --audit-full-tty`); the stdin digest covers them
	// either way.
	AuditFullTty bool
	// Registerer receives the daemon's metrics; nil makes a private
	// registry (see Daemon.Gatherer).
	Registerer prometheus.Registerer
	// Network gives sandboxes with a network policy other than none their
	// network (vmctl/network.Manager); nil refuses such creates.
	Network sandbox.NetworkProvider
	// ReapInterval is how often TTL and idle timeouts are checked; 0 means
	// 1 s.
	ReapInterval time.Duration
	// Ceilings cap what a create may ask for (admission.go).
	Ceilings Ceilings
	// Thresholds are the usage warn and act levels (usage.go).
	Thresholds Thresholds
	// UsageInterval is how often running sandboxes' usage is sampled;
	// 0 means DefaultUsageInterval.
	UsageInterval time.Duration
	// ImageVerifyCacheDir caches image verifications (image.LoadOptions);
	// "" means StateDir/image-verify. An in-process service whose
	// StateDir is per run points it at the shared cache.
	ImageVerifyCacheDir string
	// TCGCacheMiB is the TCG translation cache, in MiB, of the TCG
	// domains the daemon starts (`serve --tcg-cache`); KVM domains have
	// none. 0 means resources.DefaultTCGCacheMiB; else
	// resources.MinTCGCacheMiB..MaxTCGCacheMiB (New refuses others).
	TCGCacheMiB int
	// GuestAgentChannel gives every sandbox QEMU's own guest agent channel
	// too (sandbox.Options.GuestAgentChannel), for benchmarks against
	// qemu-ga (`agentbox run --qemu-ga-channel`).
	GuestAgentChannel bool
	// Templates are the named images create requests may ask for by name
	// (templates.go; serve --template); each must load when the daemon
	// starts.
	Templates []Template
	// Policy, when set, is asked before every create, command, file
	// operation, port forward and network policy (policy.go; serve
	// --policy runs a plugin through vmctl/policy.Client).
	Policy Policy
	// Node is this host's name in a cluster (serve --node): every
	// api.Sandbox the daemon answers carries it in Node. Empty on a
	// single host.
	Node string
	// Tenants are the daemon's tenants (serve --tenants; tenants.go): a
	// request's tenant is in its context (tenant.With); a restore of a
	// tenant's snapshot by the admin reserves that tenant's quota from
	// here. Nil: no tenants.
	Tenants *tenant.Registry
	// TenantPrivateNetworks lets tenants' sandboxes reach private (RFC
	// 1918), CGNAT and ULA destinations like the admin's (serve
	// --tenant-private-networks); by default a tenant's policy gets
	// netpolicy.Policy.BlockPrivate (network.go's tenantNetwork).
	TenantPrivateNetworks bool
	// Quotas reserves tenants' usage against their quotas; nil means a
	// tenant.LocalStore of this host (a cluster passes its own).
	Quotas tenant.QuotaStore
	// ReservedPorts are host TCP ports no port forward may bind, on any
	// address: the daemon's own listeners (the API's --listen-tcp, the
	// E2B API's --e2b-listen), which a forward taken while the daemon is
	// down would keep from listening again. The egress service's fixed
	// ports (EgressPorts) are reserved besides on every address but
	// loopback. ports.go.
	ReservedPorts []int
	// QEMUUsers, if set, runs every sandbox's QEMU as a uid of its own
	// from the range (sandbox.Config.QEMUUsers; serve --qemu-uid-range);
	// nil runs QEMU as qemu.conf's user.
	QEMUUsers *sandbox.IDRange
}

// Daemon is the running service core. Create it with New, serve its
// Backend through vmctl/api, and end it with Shutdown.
//
// It is a façade: the core (core.go: the sandbox registry, admission,
// policy asks, tenancy, events, metrics and the audit) and the services
// by resource (exec, files, lifecycle, ports, snapshots; see DESIGN.md)
// are embedded, so their methods are its methods and it satisfies
// backend.Backend and its capability interfaces. The services take the
// core, never the Daemon.
type Daemon struct {
	*core
	*execService      // exec.go, attach.go, interactive.go, procs.go
	*filesService     // files.go, watch.go
	*lifecycleService // sandboxes.go, lifecycle.go, reaper.go, templates.go, fork.go's SetTimeout, cluster.go's creates
	*portsService     // ports.go
	*snapshotService  // snapshots.go, fork.go
}

// assemble builds the Daemon's services on c and wires the core's seams
// to them (core.processes, core.forwards).
func assemble(c *core) *Daemon {
	d := &Daemon{
		core:             c,
		execService:      &execService{core: c},
		filesService:     &filesService{core: c},
		lifecycleService: &lifecycleService{core: c},
		portsService:     &portsService{core: c},
		snapshotService:  &snapshotService{core: c},
	}
	c.processes, c.forwards = d.execService, d.portsService
	return d
}

// New opens the store and the audit log under cfg.StateDir, builds the
// sandbox manager and reconciles it with libvirt (adopting sandboxes that
// still run; see sandbox.Manager.Reconcile), then starts the TTL and idle
// reaper. Errors: the store is locked by another daemon
// (store.ErrLocked), libvirt is unreachable, directories cannot be made.
func New(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if cfg.Driver == nil {
		return nil, errors.New("daemon: no driver")
	}
	if err := resources.CheckTCGCacheMiB(cfg.TCGCacheMiB); err != nil {
		return nil, fmt.Errorf("daemon: %w", err)
	}
	for name, dir := range map[string]string{"state dir": cfg.StateDir, "runtime dir": cfg.RuntimeDir} {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("daemon: %s %q must be an absolute path", name, dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("daemon: %s: %w", name, err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Accel == nil {
		cfg.Accel = func(m accel.Mode) (accel.Choice, error) { return accel.Choose(m, nil) }
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = time.Second
	}
	if cfg.ImageVerifyCacheDir == "" {
		cfg.ImageVerifyCacheDir = filepath.Join(cfg.StateDir, "image-verify")
	}
	if err := checkTemplates(ctx, cfg.Templates, image.LoadOptions{VerifyCacheDir: cfg.ImageVerifyCacheDir}); err != nil { // templates.go
		return nil, err
	}
	d := assemble(&core{cfg: cfg, log: log, boxes: map[string]*box{}, seen: map[string]string{}, events: newHub(), tenants: newTenancy(cfg)})
	d.events.owner = d.tenants.owner

	undo := revert.New()
	defer undo.OnError(ctx, &err)
	d.store, err = store.Open(filepath.Join(cfg.StateDir, "state.db"), store.Options{})
	if err != nil {
		return nil, err
	}
	undo.Add("state store", func(context.Context) error { return d.store.Close() })
	d.audit, err = audit.Open(filepath.Join(cfg.StateDir, "audit"), audit.Options{MaxBytes: cfg.AuditMaxBytes, MaxFiles: cfg.AuditMaxFiles})
	if err != nil {
		return nil, err
	}
	undo.Add("audit log", func(context.Context) error { return d.audit.Close() })
	d.metrics = newMetrics(cfg.Registerer, d.core)
	d.adm = newAdmission(cfg, d.metrics.admissionRefused)
	d.snapMetrics() // registered now, so /metrics shows them before the first snapshot
	d.limits = resources.New(cfg.Driver, log, resources.WithTCGCacheMiB(cfg.TCGCacheMiB))
	d.mgr, err = sandbox.NewManager(sandbox.Config{
		Driver:     cfg.Driver,
		Limits:     d.limits,
		StateDir:   cfg.StateDir,
		RuntimeDir: cfg.RuntimeDir,
		Logger:     log,
		Store:      d.store,
		Owner:      d.store.Instance(),
		OnChange:   d.onChange,
		Network:    cfg.Network,
		QEMUUsers:  cfg.QEMUUsers,

		OnAgentViolation: d.auditViolation, // audit.go
	})
	if err != nil {
		return nil, err
	}
	d.mgr.AddHooks(sandbox.Hooks{Reconciling: d.limits.Reconciling}) // cgroups of domains that ended while no daemon ran
	d.usage = &usageMonitor{
		interval: cfg.UsageInterval, thresholds: cfg.Thresholds, log: log,
		list: d.mgr.List, sample: d.limits.Usage, audit: d.appendAudit, publish: d.events.publish, stop: d.mgr.Stop,
	}
	d.snaps = snapshot.New(d.mgr) // before Reconcile: it keeps snapshot files
	d.warm = warm.New(d.mgr, d.snaps)
	d.warm.SetPool(cfg.WarmPool)
	d.warm.SetMode(cfg.WarmMode)
	// A tenant's warm sandboxes clone memory templates of their own
	// unless the tenants file shares them (share_templates): clones share
	// host pages (docs/tenants.md).
	d.warm.SetSharing(func(name string) bool { return d.tenants.named(name).SharesTemplates() })
	d.report, err = d.mgr.Reconcile(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile with libvirt: %w", err)
	}
	d.tenants.load(d.mgr.List())
	for _, sb := range d.mgr.List() {
		b := d.addBox(sb)
		if sb.State() == sandbox.StatePaused {
			d.recallProcesses(b) // procs.go
		}
		d.mu.Lock()
		d.seen[sb.ID] = string(sb.State())
		d.mu.Unlock()
	}
	d.reopenPorts() // ports.go
	d.startWarm()   // snapshots.go
	d.auditReconcile()
	d.adoptProcesses(ctx) // procs.go
	d.closeLostExecs()
	log.Info("daemon ready", "instance", d.store.Instance(), "sandboxes", d.report.Loaded,
		"adopted", len(d.report.Adopted), "failed", len(d.report.Failed), "cleaned", len(d.report.Cleaned))

	reapCtx, stop := context.WithCancel(context.Background())
	d.stopReaper, d.reaperDone = stop, make(chan struct{})
	go d.reaper(reapCtx)
	d.usage.start(reapCtx, d.metrics.reg)
	return d, nil
}

// Report returns what the start-up reconciliation did.
func (c *core) Report() sandbox.Report { return c.report }

// Instance returns the daemon's instance id (the store's), written into
// its domains' metadata.
func (c *core) Instance() string { return c.store.Instance() }

// Shutdown ends the daemon gracefully: new requests that need a sandbox
// get 503, in-flight execs and transfers may finish until ctx ends (then
// they are cut), sandboxes keep running for the next daemon to adopt
// (or are stopped with Config.StopOnShutdown), and the audit log and the
// store are closed. Call it after the API server stopped accepting.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.adm.close()
	d.stopReaper()
	<-d.reaperDone
	d.usage.wait()

	done := make(chan struct{})
	go func() { d.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		d.log.Warn("shutdown deadline reached with execs still running; cutting them")
	}
	d.shutdownPorts() // the records keep them for the next daemon
	for _, b := range d.allBoxes() {
		if d.cfg.StopOnShutdown {
			if err := d.mgr.Stop(context.Background(), b.sb, "daemon shut down"); err != nil {
				d.log.Warn("stop sandbox on shutdown", "sandbox", b.sb.ID, "err", err)
			}
		}
		if d.cfg.StopOnShutdown {
			b.procs.CloseAll("daemon shut down")
		} else {
			b.procs.Detach() // they run on in the guest for the next daemon
		}
		b.cancel()
	}
	d.events.close()
	return errors.Join(d.warm.Drain(context.WithoutCancel(ctx)), d.audit.Close(), d.store.Close())
}
