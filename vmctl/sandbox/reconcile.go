package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
)

// Report says what Reconcile found and did.
type Report struct {
	// Adopted lists the IDs of running sandboxes whose domain still ran
	// and whose guest agent answered again, and of sandboxes paused in
	// memory whose domain still exists.
	Adopted []string
	// Paused lists the IDs of sandboxes paused to disk, kept paused (their
	// network made again: a host reboot removes taps and rules).
	Paused []string
	// Failed maps the IDs of sandboxes marked failed to the reason.
	Failed map[string]string
	// Cleaned lists what no record knew and was removed: "domain NAME",
	// "dir PATH", "socket PATH".
	Cleaned []string
	// Loaded is the number of records read from the Store.
	Loaded int
}

// reconciler is a Manager's adoption of the sandboxes in its Store after
// a restart (Reconcile). It is a part of the Manager it points to
// (linkedManager).
type reconciler struct{ *Manager }

// adoptTimeout bounds the agent handshake with an adopted domain.
const adoptTimeout = 30 * time.Second

// orphanAge is how old a sandbox directory without record or domain must
// be before Reconcile removes it: younger ones may belong to an
// `agentbox run` that is creating its domain right now.
const orphanAge = time.Minute

var sandboxFileRE = regexp.MustCompile(`^([0-9a-f]{12})(\.qga)?\.sock$`)

// Reconcile loads the Store's records into the registry and makes them
// agree with what the hypervisor runs — libvirt is the truth:
//   - a running (or stopping) sandbox whose domain still runs is adopted:
//     the stop watch and the agent connection are made again, so exec
//     works; a stopping one is stopped; a running one whose vCPUs a
//     killed daemon left stopped (mid-pause, mid-save) runs again, and
//     saved states of pauses to disk its record does not name are
//     deleted from its overlay;
//   - a running sandbox whose domain is gone is marked failed ("domain
//     vanished while the daemon was down");
//   - a sandbox left creating by a crash is failed and its domain
//     destroyed;
//   - a sandbox paused to disk has no domain and stays paused (a domain
//     left by a crash mid-pause or mid-resume is destroyed; the saved
//     state is in its overlay); its network is made again (Adopt), so a
//     host reboot keeps it resumable;
//   - a sandbox paused in memory is adopted like a running one, without
//     the agent's handshake (its vCPUs are stopped; Resume connects);
//   - a domain carrying this manager's Owner that no record knows is
//     destroyed, and so are sandbox directories and agent sockets that
//     neither a record nor any domain uses.
//
// Call it once, before serving, on a Manager with a Store and an Owner.
func (m *reconciler) Reconcile(ctx context.Context) (Report, error) {
	rep := Report{Failed: map[string]string{}}
	if m.cfg.Store == nil {
		return rep, nil
	}
	recs, err := m.cfg.Store.Sandboxes()
	if err != nil {
		return rep, fmt.Errorf("load sandbox records: %w", err)
	}
	rep.Loaded = len(recs)
	doms, err := m.cfg.Driver.ListDomains(ctx)
	if err != nil {
		return rep, fmt.Errorf("list domains: %w", err)
	}
	byName := map[string]DomainStatus{}
	anyOwner := map[string]bool{} // sandbox IDs of every agentbox domain
	for _, d := range doms {
		anyOwner[d.SandboxID] = true
		if d.Owner == m.cfg.Owner && m.cfg.Owner != "" {
			byName[d.Name] = d
		}
	}
	known := map[string]bool{}

	var adopt []*Sandbox
	for _, r := range recs {
		known[r.ID] = true
		sb := m.fromRecord(r)
		if err := m.register(sb, nil); err != nil {
			// Two records with one name: keep the first, fail the other.
			sb.Name = ""
			sb.rec.Name = ""
			m.register(sb, nil)
		}
		m.takeBackDir(sb) // qemuuser.go
		d, exists := byName[r.Domain]
		switch {
		case r.State.Final():
			if exists && d.Running {
				m.cfg.Driver.DestroyDomain(ctx, r.Domain)
			}
			sb.markStopped()
		case r.State == StateCreating:
			if exists {
				m.cfg.Driver.DestroyDomain(ctx, r.Domain)
			}
			m.fail(sb, "the daemon stopped while the sandbox was being created", &rep)
		case r.PausedToDisk():
			if exists {
				m.cfg.Driver.DestroyDomain(ctx, r.Domain)
			}
			sb.markStopped()
			m.adoptNetwork(ctx, sb)
			rep.Paused = append(rep.Paused, sb.ID)
		case !exists || !d.Running:
			if exists {
				m.cfg.Driver.DestroyDomain(ctx, r.Domain)
			}
			m.fail(sb, "domain vanished while the daemon was down", &rep)
		default:
			if err := m.watch(sb); err != nil {
				m.fail(sb, "watch domain after restart: "+err.Error(), &rep)
				continue
			}
			adopt = append(adopt, sb)
		}
	}

	// The watches are in place: a domain that stopped since the listing
	// is either reported by its watch or missing from a second listing.
	if len(adopt) > 0 {
		if doms, err = m.cfg.Driver.ListDomains(ctx); err != nil {
			return rep, fmt.Errorf("list domains: %w", err)
		}
		running := map[string]bool{}
		for _, d := range doms {
			running[d.Name] = d.Running
		}
		for _, sb := range adopt {
			if !running[sb.Domain] {
				sb.unwatch()
				m.fail(sb, "domain vanished while the daemon was down", &rep)
				continue
			}
			if sb.State() == StateStopping {
				m.Stop(ctx, sb, sb.Record().Reason)
				continue
			}
			if sb.State() == StatePaused {
				m.adoptNetwork(ctx, sb)
				rep.Adopted = append(rep.Adopted, sb.ID)
				m.log.Info("paused sandbox adopted", "sandbox", sb.ID, "domain", sb.Domain)
				continue
			}
			// A daemon killed while the vCPUs were stopped (mid-pause,
			// during a pause to disk's save, or a restore's copy of this
			// overlay) left the domain paused although the record says
			// running: its agent cannot answer until it runs again.
			snap, _ := m.cfg.Driver.(Snapshotter)
			if snap != nil {
				if err := snap.ResumeDomain(ctx, sb.Domain); err != nil {
					m.log.Warn("let an adopted domain's vCPUs run", "sandbox", sb.ID, "domain", sb.Domain, "err", err)
				}
			}
			c, err := sb.connectAgent(ctx, adoptTimeout)
			if err != nil {
				m.cfg.Driver.DestroyDomain(context.WithoutCancel(ctx), sb.Domain)
				sb.unwatch()
				m.fail(sb, "guest agent did not answer after the daemon restarted: "+err.Error(), &rep)
				continue
			}
			sb.mu.Lock()
			sb.agent = c
			sb.mu.Unlock()
			sb.watchAgent(c)
			m.adoptNetwork(ctx, sb)
			if snap != nil {
				m.dropStaleSavedStates(ctx, sb, "", snap)
			}
			rep.Adopted = append(rep.Adopted, sb.ID)
			m.log.Info("sandbox adopted", "sandbox", sb.ID, "domain", sb.Domain)
		}
	}

	// Domains of ours that no record knows.
	for name, d := range byName {
		if known[d.SandboxID] {
			continue
		}
		if err := m.cfg.Driver.DestroyDomain(ctx, name); err != nil {
			m.log.Warn("destroy unknown domain", "domain", name, "err", err)
			continue
		}
		rep.Cleaned = append(rep.Cleaned, "domain "+name)
		m.log.Warn("destroyed a domain no record knows", "domain", name, "sandbox", d.SandboxID)
	}
	for _, h := range m.allHooks() { // before cleanFiles: snapshots may live in a dir it removes
		if h.Reconciling != nil {
			h.Reconciling(ctx, known, &rep)
		}
	}
	m.cleanFiles(known, anyOwner, &rep)
	m.sweepNetwork(ctx)
	return rep, nil
}

// cleanFiles removes sandbox directories and agent sockets that neither
// a record nor any domain (of any owner) uses.
func (m *reconciler) cleanFiles(known, domains map[string]bool, rep *Report) {
	dir := SandboxesDir(m.cfg.StateDir)
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		id := e.Name()
		if known[id] || domains[id] {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < orphanAge {
			continue
		}
		p := filepath.Join(dir, id)
		if err := os.RemoveAll(p); err == nil {
			rep.Cleaned = append(rep.Cleaned, "dir "+p)
			m.log.Warn("removed a sandbox dir no record knows", "path", p)
		}
	}
	entries, _ = os.ReadDir(m.cfg.RuntimeDir)
	for _, e := range entries {
		mt := sandboxFileRE.FindStringSubmatch(e.Name())
		if mt == nil || known[mt[1]] || domains[mt[1]] {
			continue
		}
		p := filepath.Join(m.cfg.RuntimeDir, e.Name())
		if err := os.Remove(p); err == nil {
			rep.Cleaned = append(rep.Cleaned, "socket "+p)
		}
	}
}

// fromRecord rebuilds a Sandbox from its durable record.
func (m *Manager) fromRecord(r Record) *Sandbox {
	sb := linked(&Sandbox{
		ID: r.ID, Name: r.Name, Labels: r.Labels, Domain: r.Domain, Dir: r.Dir,
		Overlay: r.Overlay, ConsoleLog: r.ConsoleLog, AgentSocket: r.AgentSocket,
		Accel:    accel.Choice{DomainType: r.DomainType, Accel: accel.Mode(r.Accel), Reason: "adopted"},
		VCPUs:    r.VCPUs,
		Memory:   r.MemoryMiB,
		Shared:   r.SharedMemory.clone(),
		BootTime: time.Duration(r.BootMs) * time.Millisecond,
		obs:      observer{m},
		log:      m.log,
		life:     newLife(),
		rec:      r,
	})
	sb.stopWatch = func() {}
	sb.loadAccount()
	return sb
}

// markStopped closes the stopped channel of a sandbox whose domain is
// known to be gone.
func (sb *domainEnd) markStopped() {
	sb.curLife().end(Stop{Reason: "stopped/before restart"})
}

// fail marks sb failed with reason (if it is not final yet) and records it
// in rep.
func (m *reconciler) fail(sb *Sandbox, reason string, rep *Report) {
	if err := sb.setState(StateFailed, reason); err != nil && !errors.Is(err, ErrConflict) {
		m.log.Warn("mark sandbox failed", "sandbox", sb.ID, "err", err)
	}
	sb.markStopped()
	sb.release()
	rep.Failed[sb.ID] = reason
	m.log.Warn("sandbox failed during reconcile", "sandbox", sb.ID, "domain", sb.Domain, "reason", reason)
}
