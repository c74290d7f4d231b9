package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
)

// Thresholds are the usage levels, in percent of a limit, at which the
// daemon warns (audit entry "resource" and event "sandbox.resource") and
// acts (stops the sandbox, reason naming the numbers): QEMU's resident
// memory against its hard limit, the overlay's host bytes against the
// disk's size. Zero fields take the defaults, 80 and 95; a negative one
// turns that level off.
type Thresholds struct {
	WarnPercent int
	ActPercent  int
}

// DefaultUsageInterval is how often the daemon samples the usage of its
// running sandboxes when Config.UsageInterval is zero.
const DefaultUsageInterval = 5 * time.Second

// ActionResource is the audit action of a usage threshold crossed (warn
// or act); its args say which limit, the numbers and what was done.
const ActionResource = "resource"

// usageMonitor samples the usage of the daemon's running sandboxes
// (resources.Enforcer.Usage) every interval, keeps the latest sample of
// each for the API view and the agentbox_sandbox_* gauges, and applies
// the Thresholds: a crossed warn level is audited ("resource"), published
// ("sandbox.resource") and logged once per sandbox and limit; a crossed
// act level does the same and stops the sandbox with a reason naming the
// numbers. What it needs of the daemon comes as the func fields, so it
// knows no *Daemon.
type usageMonitor struct {
	interval   time.Duration // Config.UsageInterval, defaulted
	thresholds Thresholds
	log        *slog.Logger

	// list returns the daemon's sandboxes (sandbox.Manager.List); the
	// running ones are sampled.
	list func() []*sandbox.Sandbox
	// sample reads one sandbox's usage (resources.Enforcer.Usage).
	sample func(context.Context, *sandbox.Sandbox) (resources.Usage, error)
	// audit appends an entry to the daemon's audit log.
	audit func(audit.Entry)
	// publish sends an event to the daemon's event streams.
	publish func(api.Event)
	// stop stops a sandbox with a reason (sandbox.Manager.Stop).
	stop func(ctx context.Context, sb *sandbox.Sandbox, reason string) error

	mu     sync.Mutex
	usage  map[string]resources.Usage // by sandbox ID: the latest sample
	warned map[string]bool            // sandbox ID + limit: a warning was given
	done   chan struct{}
}

// start samples every running sandbox's usage each interval until ctx
// ends, keeps the latest sample for the API and metrics, and applies the
// thresholds. It registers the usage gauges with reg.
func (m *usageMonitor) start(ctx context.Context, reg prometheus.Registerer) {
	m.usage, m.warned, m.done = map[string]resources.Usage{}, map[string]bool{}, make(chan struct{})
	interval := m.interval
	if interval <= 0 {
		interval = DefaultUsageInterval
	}
	reg.MustRegister(&usageCollector{m: m})
	go func() {
		defer close(m.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			m.sampleUsage(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// wait waits for the monitor to end (after its context).
func (m *usageMonitor) wait() {
	if m.done != nil {
		<-m.done
	}
}

// latest returns the latest usage sample of the sandbox with the given ID.
func (m *usageMonitor) latest(id string) (resources.Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.usage[id]
	return u, ok
}

// unexpectedPause reports whether u is of a domain paused other than by
// a job in progress (a snapshot, save, migration or start): QEMU stopping
// the guest on a host I/O error (ENOSPC, EIO), a watchdog, a crash, an
// unknown reason, or a suspend ("user") — agentbox's own or someone's
// behind its back: pausedBehindOurBack tells them apart.
func unexpectedPause(u resources.Usage) bool {
	if u.DomainState != "paused" {
		return false
	}
	switch u.PauseReason {
	case "migration", "save", "dump", "from-snapshot", "shutting-down", "snapshot", "starting-up", "postcopy":
		return false
	}
	return true
}

// pausedBehindOurBack reports whether sb's domain, seen paused in a
// sample, is paused while agentbox has it running: checked again under
// sb's operation lock, so that a pause agentbox is making (a pause, the
// source of a restore being copied, a save) ends first, and a sandbox it
// paused (state paused) is no warning.
func (m *usageMonitor) pausedBehindOurBack(ctx context.Context, sb *sandbox.Sandbox) bool {
	behind := false
	sb.Exclusive(func() error {
		if sb.State() != sandbox.StateRunning {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		u, err := m.sample(cctx, sb)
		behind = err == nil && unexpectedPause(u)
		return nil
	})
	return behind
}

// sampleUsage reads every running sandbox's usage once.
func (m *usageMonitor) sampleUsage(ctx context.Context) {
	live := map[string]bool{}
	for _, sb := range m.list() {
		if sb.State() != sandbox.StateRunning {
			continue
		}
		live[sb.ID] = true
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		u, err := m.sample(cctx, sb)
		cancel()
		if err != nil {
			continue
		}
		m.mu.Lock()
		prev, had := m.usage[sb.ID]
		m.usage[sb.ID] = u
		m.mu.Unlock()
		if unexpectedPause(u) && (!had || !unexpectedPause(prev)) && m.pausedBehindOurBack(ctx, sb) {
			m.resourceEvent(sb, "paused", fmt.Sprintf("the domain is paused (%s)", orUnknown(u.PauseReason)), "warn", nil)
		}
		m.checkThresholds(sb, u)
	}
	m.mu.Lock()
	for id := range m.usage {
		if !live[id] {
			delete(m.usage, id)
		}
	}
	for key := range m.warned {
		if id, _, _ := strings.Cut(key, "/"); !live[id] {
			delete(m.warned, key)
		}
	}
	m.mu.Unlock()
}

func orUnknown(s string) string {
	if s == "" {
		return "reason unknown"
	}
	return s
}

// levels returns the warn and act levels in percent (≤ 0: off).
func (m *usageMonitor) levels() (warn, act int) {
	warn, act = m.thresholds.WarnPercent, m.thresholds.ActPercent
	if warn == 0 {
		warn = 80
	}
	if act == 0 {
		act = 95
	}
	return warn, act
}

// checkThresholds warns once per sandbox and limit when usage crosses the
// warn level, and stops the sandbox when it crosses the act level.
func (m *usageMonitor) checkThresholds(sb *sandbox.Sandbox, u resources.Usage) {
	warn, act := m.levels()
	for _, c := range []struct {
		limit     string
		used, cap uint64
		what      string
	}{
		{"memory", u.MemoryRSSBytes, u.MemoryLimitBytes, "QEMU resident memory"},
		{"disk", u.DiskBytes, u.DiskCapBytes, "overlay disk use"},
	} {
		if c.cap == 0 {
			continue
		}
		pct := int(c.used * 100 / c.cap)
		msg := fmt.Sprintf("%s %d MiB is %d%% of its %d MiB limit", c.what, c.used>>20, pct, c.cap>>20)
		args := map[string]any{"limit": c.limit, "used_bytes": c.used, "limit_bytes": c.cap, "percent": pct}
		if warn > 0 && pct >= warn && m.firstTime(sb.ID+"/warn/"+c.limit) {
			m.resourceEvent(sb, c.limit, msg+fmt.Sprintf(" (warn threshold %d%%)", warn), "warn", args)
		}
		if act > 0 && pct >= act && m.firstTime(sb.ID+"/act") {
			m.resourceEvent(sb, c.limit, msg+fmt.Sprintf(" (act threshold %d%%): stopping the sandbox", act), "stop", args)
			go func() {
				if err := m.stop(context.Background(), sb, msg); err != nil {
					m.log.Warn("stop sandbox over its threshold", "sandbox", sb.ID, "err", err)
				}
			}()
			return
		}
	}
}

// firstTime reports whether key is seen for the first time (and marks
// it).
func (m *usageMonitor) firstTime(key string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.warned[key] {
		return false
	}
	m.warned[key] = true
	return true
}

// resourceEvent audits and publishes a usage warning or action.
func (m *usageMonitor) resourceEvent(sb *sandbox.Sandbox, limit, reason, action string, args map[string]any) {
	if args == nil {
		args = map[string]any{"limit": limit}
	}
	args["reason"], args["action"] = reason, action
	m.audit(auditEntry(time.Now(), sb.ID, "daemon", ActionResource, args))
	m.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSandboxResource, Sandbox: sb.ID, Name: sb.Name, State: string(sb.State()), Reason: reason})
	m.log.Warn("sandbox resource threshold", "sandbox", sb.ID, "limit", limit, "action", action, "reason", reason)
}

// usageCollector exports the monitor's latest usage samples as gauges
// labelled by sandbox ID.
type usageCollector struct{ m *usageMonitor }

var usageDescs = map[string]*prometheus.Desc{
	"cpu":     prometheus.NewDesc("agentbox_sandbox_cpu_seconds", "CPU time of the sandbox's QEMU process (a counter sampled every few seconds).", []string{"sandbox"}, nil),
	"rss":     prometheus.NewDesc("agentbox_sandbox_memory_rss_bytes", "Resident memory of the sandbox's QEMU process.", []string{"sandbox"}, nil),
	"memlim":  prometheus.NewDesc("agentbox_sandbox_memory_limit_bytes", "Enforced memory hard limit of the sandbox's QEMU process (absent when none).", []string{"sandbox"}, nil),
	"disk":    prometheus.NewDesc("agentbox_sandbox_disk_bytes", "Host bytes the sandbox's overlay occupies.", []string{"sandbox"}, nil),
	"diskcap": prometheus.NewDesc("agentbox_sandbox_disk_cap_bytes", "Virtual size of the sandbox's disk.", []string{"sandbox"}, nil),
	"rx":      prometheus.NewDesc("agentbox_sandbox_network_receive_bytes", "Bytes the sandbox's interfaces received.", []string{"sandbox"}, nil),
	"tx":      prometheus.NewDesc("agentbox_sandbox_network_transmit_bytes", "Bytes the sandbox's interfaces sent.", []string{"sandbox"}, nil),
	"pids":    prometheus.NewDesc("agentbox_sandbox_host_tasks", "Host tasks (processes and threads) of the sandbox's QEMU process.", []string{"sandbox"}, nil),
	"pss":     prometheus.NewDesc("agentbox_sandbox_memory_pss_bytes", "Proportional set size of the sandbox's QEMU process (shared pages divided among the processes mapping them).", []string{"sandbox"}, nil),
	"private": prometheus.NewDesc("agentbox_sandbox_memory_private_bytes", "Resident memory only the sandbox's QEMU process maps.", []string{"sandbox"}, nil),
	"shared":  prometheus.NewDesc("agentbox_sandbox_memory_shared_bytes", "Resident memory the sandbox's QEMU process shares with other processes (a memory template's clones share its guest RAM pages).", []string{"sandbox"}, nil),
	"paused":  prometheus.NewDesc("agentbox_sandbox_paused", "1 while the sandbox's domain is paused (e.g. QEMU stopped it on a host I/O error).", []string{"sandbox"}, nil),
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range usageDescs {
		ch <- d
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.m.mu.Lock()
	defer c.m.mu.Unlock()
	g := func(name string, v float64, id string) {
		ch <- prometheus.MustNewConstMetric(usageDescs[name], prometheus.GaugeValue, v, id)
	}
	for id, u := range c.m.usage {
		g("cpu", float64(u.CPUTimeNs)/1e9, id)
		g("rss", float64(u.MemoryRSSBytes), id)
		if u.MemoryLimitBytes > 0 {
			g("memlim", float64(u.MemoryLimitBytes), id)
		}
		g("disk", float64(u.DiskBytes), id)
		g("diskcap", float64(u.DiskCapBytes), id)
		g("rx", float64(u.NetRxBytes), id)
		g("tx", float64(u.NetTxBytes), id)
		if u.Pids >= 0 {
			g("pids", float64(u.Pids), id)
		}
		if m := u.Memory; m != nil {
			g("pss", float64(m.PSSBytes), id)
			g("private", float64(m.PrivateBytes), id)
			g("shared", float64(m.SharedBytes), id)
		}
		paused := 0.0
		if u.DomainState == "paused" {
			paused = 1
		}
		g("paused", paused, id)
	}
}
