package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/revert"
)

// This file is the sandbox's life after its first run: pause (in memory
// or to disk), resume in place, and start of a stopped sandbox (a cold
// boot on its kept overlay). Each runs under the sandbox's opMu, so two of
// them (or one and a stop or remove) never interleave.

// pauseResume is a Manager's pause, resume and start of its sandboxes,
// with the reservation of their resources and their saved states. It is a
// part of the Manager it points to (linkedManager).
type pauseResume struct{ *Manager }

// PauseRecord says how a paused sandbox is paused (Record.Paused).
type PauseRecord struct {
	// ToDisk: the machine (memory, devices, disk) is saved as the
	// internal snapshot Tag of File and its QEMU is gone; otherwise its
	// vCPUs are stopped and QEMU keeps its memory.
	ToDisk bool `json:"to_disk"`
	// At is when the sandbox was paused (UTC).
	At time.Time `json:"at"`
	// File and Tag: the qcow2 file (the sandbox's overlay) and the
	// internal snapshot in it that hold the saved machine (to disk only).
	File string `json:"file,omitempty"`
	Tag  string `json:"tag,omitempty"`
	// ImageDigest is the digest of the image the state was saved on; a
	// resume refuses another.
	ImageDigest string `json:"image_digest,omitempty"`
	// SaveMs is how long the save took, in milliseconds.
	SaveMs int64 `json:"save_ms,omitempty"`
	// VMStateBytes is the size of the saved memory and device state, and
	// DiskBytes how much the overlay's allocation on the host grew with
	// the save, in bytes: what the paused sandbox costs on disk.
	VMStateBytes int64 `json:"vmstate_bytes,omitempty"`
	DiskBytes    int64 `json:"disk_bytes,omitempty"`
}

// PausedToDisk reports whether the record is of a sandbox paused to disk
// (no domain; its machine saved in its overlay).
func (r Record) PausedToDisk() bool {
	return r.State == StatePaused && r.Paused != nil && r.Paused.ToDisk
}

// pauseState is what a sandbox's lifecycle changes check on it: whether
// it holds resources, its operation lock (Exclusive), whether its state
// allows a change (need). It is a part of the Sandbox it points to
// (linked).
type pauseState struct{ *Sandbox }

// holdsResources reports whether sb counts against the capacity: a live
// domain, or one being brought back (reserved).
func (sb *pauseState) holdsResources() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.reserved || !sb.rec.State.Final() && !sb.rec.PausedToDisk()
}

// Exclusive runs fn while holding sb's operation lock, the one Pause,
// Resume, Start, Stop and Remove hold for their whole run: none of them
// runs on sb during fn (they wait for it), and fn waits for one under
// way. It is for work outside this package that changes sb's domain
// behind the manager's back and must not interleave with its lifecycle:
// a restore pausing its running source to copy its overlay
// (vmctl/sandbox/snapshot), a snapshot save. fn must not call those
// methods on sb (the lock is not reentrant); take the lock before any
// lock of sb's files (Remove holds it while its hooks take them). It
// returns fn's error.
func (sb *pauseState) Exclusive(fn func() error) error {
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	return fn()
}

// snapshotter returns the driver as a Snapshotter (pause and resume need
// its PauseDomain, ResumeDomain and snapshot jobs), or ErrUnsupported.
func (m *pauseResume) snapshotter() (Snapshotter, error) {
	snap, ok := m.cfg.Driver.(Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: the %T driver cannot pause domains: use the libvirt driver", ErrUnsupported, m.cfg.Driver)
	}
	return snap, nil
}

// Pause pauses the running sandbox sb. In memory (toDisk false) its vCPUs
// stop (libvirt suspend) and QEMU keeps its memory; the agent connection
// stays. To disk, its machine is saved into its overlay as an internal
// snapshot (the snapshot machinery's QMP snapshot-save, the vCPUs stopped
// first) and its domain destroyed, keeping the record (state paused,
// Record.Paused says where the state is), overlay, tap, address and
// firewall rules for Resume. reason is recorded with the state.
//
// Errors: ErrConflict when sb is not running (already paused, stopped,
// …: the message says what to do); ErrUnsupported; ErrNoSpace when the
// save filled the disk; the driver's. On error sb keeps running and no
// saved state is left.
func (m *pauseResume) Pause(ctx context.Context, sb *Sandbox, toDisk bool, reason string) (err error) {
	ctx = context.WithoutCancel(ctx)
	snap, err := m.snapshotter()
	if err != nil {
		return err
	}
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	r := sb.Record()
	if err := sb.need(r, "paused", StateRunning); err != nil {
		return err
	}
	if toDisk && r.Spec == nil {
		return fmt.Errorf("%w: sandbox %s was created by an agentbox without snapshot support: it can only be paused in memory", ErrUnsupported, sb.ID)
	}
	if err := snap.PauseDomain(ctx, sb.Domain); err != nil {
		return fmt.Errorf("pause sandbox %s: %w", sb.ID, err)
	}
	p := &PauseRecord{ToDisk: toDisk, At: time.Now().UTC()}
	undo := revert.New()
	defer undo.OnError(ctx, &err)
	undo.Add("vcpus", func(ctx context.Context) error { return snap.ResumeDomain(ctx, sb.Domain) })
	if toDisk {
		id, err := NewID()
		if err != nil {
			return err
		}
		p.File, p.Tag, p.ImageDigest = sb.Overlay, "p"+id, r.ImageDigest
		before := overlay.Allocated(sb.Overlay)
		start := time.Now()
		if err := snap.SaveSnapshot(ctx, sb.Domain, p.Tag); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				err = fmt.Errorf("%w: %w", ErrNoSpace, err)
			}
			return fmt.Errorf("pause sandbox %s to disk: %w; it keeps running", sb.ID, err)
		}
		undo.Add("saved state", func(ctx context.Context) error { return snap.DeleteSnapshot(ctx, sb.Domain, p.Tag) })
		p.SaveMs = time.Since(start).Milliseconds()
		p.DiskBytes = max(overlay.Allocated(sb.Overlay)-before, 0)
		if list, err := overlay.Snapshots(ctx, sb.Overlay); err == nil {
			for _, o := range list {
				if o.Tag == p.Tag {
					p.VMStateBytes = int64(o.VMStateSize)
				}
			}
		}
	}
	sb.mu.Lock()
	sb.rec.Paused = p
	sb.mu.Unlock()
	if err = sb.setState(StatePaused, reason); err != nil {
		sb.mu.Lock()
		sb.rec.Paused = nil
		sb.mu.Unlock()
		return err
	}
	undo.Success()
	if !toDisk {
		m.log.Debug("sandbox paused", "sandbox", sb.ID, "domain", sb.Domain)
		return nil
	}
	// The record says paused to disk from here on: a daemon killed now
	// destroys the domain on its restart and keeps the saved state. The
	// watch ends first, so the destroy does not read as a failure, and the
	// network stays (see watch).
	sb.release()
	sb.unwatch()
	derr := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
	m.cfg.Limits.Release(sb)
	sb.curLife().end(Stop{Reason: "paused to disk"})
	if derr != nil {
		return fmt.Errorf("pause sandbox %s to disk: the state is saved, but destroying its domain failed (a resume destroys it first): %w", sb.ID, derr)
	}
	m.log.Debug("sandbox paused to disk", "sandbox", sb.ID, "domain", sb.Domain, "save_ms", p.SaveMs, "vmstate_bytes", p.VMStateBytes, "disk_bytes", p.DiskBytes)
	return nil
}

// need returns nil when r's state is one of want, else the ErrConflict
// saying why sb cannot be what (e.g. "paused") and what to do.
func (sb *pauseState) need(r Record, what string, want ...State) error {
	if slices.Contains(want, r.State) {
		return nil
	}
	ref := sb.ID
	if sb.Name != "" {
		ref = sb.Name
	}
	var hint string
	switch r.State {
	case StatePaused:
		hint = fmt.Sprintf("it is paused already: resume it first (agentbox resume %s)", ref)
	case StateRunning:
		hint = "it is running"
	case StateStopped, StateFailed:
		hint = fmt.Sprintf("its domain is gone: start it again first (agentbox start %s) or create a new sandbox", ref)
	default:
		hint = "wait until it is running"
	}
	msg := fmt.Sprintf("sandbox %s is %s", sb.ID, r.State)
	if r.Reason != "" {
		msg += " (" + r.Reason + ")"
	}
	return fmt.Errorf("%w: %s and cannot be %s: %s", ErrConflict, msg, what, hint)
}

// ResumeOptions tune Resume.
type ResumeOptions struct {
	// Image is the sandbox's image as it is now at Record.ImageDir, and
	// ImageErr why it could not be loaded: a resume from disk refuses
	// another image than the state was saved on (the sandbox fails). Not
	// needed for a resume in memory.
	Image    *image.Image
	ImageErr error
	// Admit, if set, checks the capacity before a sandbox paused to disk
	// gets its domain back (see Options.Admit).
	Admit func(r Resources) error
	// Timeout bounds the agent's handshake after the domain resumed; 0
	// means 60 s.
	Timeout time.Duration
}

// Resume lets the paused sandbox sb run again in place: same ID, name,
// overlay, tap and address. In memory its vCPUs go on. From disk a new
// domain of the same spec starts paused in place, loads the saved state
// from the overlay, runs, the agent is reconnected and the guest
// refreshed (its clock set to the host's: RefreshGuest), and the saved
// state is deleted. The idle clock starts again.
//
// Errors: ErrConflict when sb is not paused; the admission's error (sb
// stays paused). A resume in memory whose vCPUs do not run again leaves
// sb paused; one whose guest agent then does not answer (only asked
// when this process has no connection to it, after a daemon restart)
// leaves sb failed with the reason, its domain destroyed and what it
// held on the host (cgroups, network, sockets) released, as at a stop.
// A resume from disk that fails otherwise — the saved
// state gone, damaged or of another image, the guest not answering —
// leaves sb failed with the reason and no domain (ErrSnapshotUnusable for
// the saved state; the step's error says "resume step <name>: …").
func (m *pauseResume) Resume(ctx context.Context, sb *Sandbox, opts ResumeOptions) error {
	ctx = context.WithoutCancel(ctx)
	snap, err := m.snapshotter()
	if err != nil {
		return err
	}
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	r := sb.Record()
	if r.State == StateRunning {
		return fmt.Errorf("%w: sandbox %s is running, not paused: nothing to resume", ErrConflict, sb.ID)
	}
	if err := sb.need(r, "resumed", StatePaused); err != nil {
		return err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	if !r.PausedToDisk() {
		return m.resumeInMemory(ctx, snap, sb, timeout)
	}
	p := *r.Paused
	m.unshare(sb) // the saved state loads into private RAM (sharedmem.go)
	if err := m.reserve(sb, opts.Admit); err != nil {
		return err
	}
	defer m.unreserve(sb)
	b := m.rebuild(sb)
	err = b.Run(ctx, "resume",
		Step{Name: "saved state", Run: func(ctx context.Context, b *Build) error {
			return checkSavedState(ctx, sb, p, opts)
		}},
		stepLeftover(),
		StepDomain(snap.StartDomainPaused),
		StepLoad(snap, p.Tag, "the saved state of sandbox "+sb.ID),
		StepResumeDomain(snap),
		StepAgent(timeout),
		StepRefresh(),
		Step{Name: "running", Run: func(ctx context.Context, b *Build) error {
			sb.mu.Lock()
			sb.agent = b.Agent
			sb.mu.Unlock()
			sb.watchAgent(b.Agent)
			return sb.setState(StateRunning, "")
		}},
	)
	if err != nil {
		// Nothing of the new domain is left (its undo ran); the sandbox
		// cannot go on from a state that does not load: failed, with the
		// network it no longer needs gone.
		sb.setState(StateFailed, "resume from disk failed: "+err.Error())
		m.teardownNetwork(ctx, sb)
		return err
	}
	b.Done()
	sb.Touch()
	if derr := snap.DeleteSnapshot(ctx, sb.Domain, p.Tag); derr != nil {
		m.log.Warn("delete the saved state of a resumed sandbox", "sandbox", sb.ID, "tag", p.Tag, "err", derr)
	}
	m.log.Debug("sandbox resumed from disk", "sandbox", sb.ID, "domain", sb.Domain,
		"start_ms", b.Times.Start.Milliseconds(), "load_ms", b.Times.Load.Milliseconds())
	return nil
}

// resumeInMemory lets the paused domain's vCPUs run, reconnects the
// agent if this process has no connection yet (a daemon restarted while
// the sandbox was paused), refreshes the guest and marks sb running. If
// the vCPUs do not run again, sb stays paused; if the agent does not
// answer, sb fails and its domain is destroyed and released like a
// stopped one's.
func (m *pauseResume) resumeInMemory(ctx context.Context, snap Snapshotter, sb *Sandbox, timeout time.Duration) error {
	if err := snap.ResumeDomain(ctx, sb.Domain); err != nil {
		return fmt.Errorf("resume sandbox %s: %w", sb.ID, err)
	}
	sb.mu.Lock()
	c := sb.agent
	sb.mu.Unlock()
	if c == nil {
		var err error
		if c, err = sb.connectAgent(ctx, timeout); err != nil {
			// A guest that runs but does not answer cannot be used: the
			// sandbox fails with the reason and its domain goes with
			// everything it held on the host, as at a stop (cgroups,
			// network, sockets); Start boots it again.
			sb.setState(StateFailed, "guest agent did not answer after resume: "+err.Error())
			sb.release()
			derr := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
			m.cfg.Limits.Release(sb)
			sb.unwatch()
			m.teardownNetwork(ctx, sb)
			if derr != nil {
				err = errors.Join(err, fmt.Errorf("destroy its domain: %w", derr))
			}
			return fmt.Errorf("resume sandbox %s: %w", sb.ID, err)
		}
		sb.mu.Lock()
		sb.agent = c
		sb.mu.Unlock()
		sb.watchAgent(c)
	}
	if err := RefreshGuest(ctx, c); err != nil {
		m.log.Warn("refresh resumed guest", "sandbox", sb.ID, "err", err)
	}
	if err := sb.setState(StateRunning, ""); err != nil {
		return err
	}
	sb.Touch()
	m.log.Debug("sandbox resumed", "sandbox", sb.ID, "domain", sb.Domain)
	return nil
}

// checkSavedState checks, before anything starts, that p's state can be
// loaded: the image is the one it was saved on, the file is there, reads
// as qcow2 and holds the tag. Errors wrap ErrSnapshotUnusable.
func checkSavedState(ctx context.Context, sb *Sandbox, p PauseRecord, opts ResumeOptions) error {
	switch {
	case opts.ImageErr != nil:
		return fmt.Errorf("%w: the image of sandbox %s cannot be loaded: %v", ErrSnapshotUnusable, sb.ID, opts.ImageErr)
	case opts.Image == nil:
		return fmt.Errorf("%w: resume of sandbox %s: no image", ErrInvalid, sb.ID)
	case opts.Image.Digest != p.ImageDigest:
		return fmt.Errorf("%w: sandbox %s was paused on image sha256:%s and %s now holds sha256:%s: its saved state only loads on that image", ErrSnapshotUnusable, sb.ID, p.ImageDigest, opts.Image.Dir, opts.Image.Digest)
	}
	if _, err := os.Stat(p.File); err != nil {
		return fmt.Errorf("%w: the saved state of sandbox %s is gone: %v", ErrSnapshotUnusable, sb.ID, err)
	}
	tags, err := overlay.Snapshots(ctx, p.File)
	if err != nil {
		return fmt.Errorf("%w: the saved state of sandbox %s in %s is damaged: %v", ErrSnapshotUnusable, sb.ID, p.File, err)
	}
	if !slices.ContainsFunc(tags, func(o overlay.Snapshot) bool { return o.Tag == p.Tag }) {
		return fmt.Errorf("%w: the saved state of sandbox %s is gone: %s no longer holds %s", ErrSnapshotUnusable, sb.ID, p.File, p.Tag)
	}
	return nil
}

// StartOptions tune Start.
type StartOptions struct {
	// Image is the sandbox's image as it is now at Record.ImageDir; it
	// must be the one the sandbox was created on (its overlay's backing
	// file). Required.
	Image *image.Image
	// Admit, if set, checks the capacity first (see Options.Admit).
	Admit func(r Resources) error
	// BootTimeout bounds the boot; 0 means 120 s.
	BootTimeout time.Duration
}

// Start boots the stopped (or failed) sandbox sb again, a cold boot on its
// kept overlay: same ID, name, labels, limits and network policy, its
// files as the guest left them, no processes. Its network is made anew:
// the same tap name (it derives from the ID) and MAC, a /30 allocated
// again (the same one unless another sandbox took it meanwhile). Saved
// states of pauses to disk in its overlay (a failed resume's, or one an
// interrupted pause left) are dropped.
//
// Errors: ErrConflict when sb is not stopped or failed (running, paused:
// the message says so); ErrUnsupported for a sandbox from before
// snapshots (no spec kept); ErrCannotStart when its overlay is gone or
// the image changed; the admission's error (nothing changed). A boot that
// fails undoes its steps and leaves sb failed with the reason.
func (m *pauseResume) Start(ctx context.Context, sb *Sandbox, opts StartOptions) error {
	ctx = context.WithoutCancel(ctx)
	sb.opMu.Lock()
	defer sb.opMu.Unlock()
	r := sb.Record()
	if r.State == StateRunning {
		return fmt.Errorf("%w: sandbox %s is running already: start boots a stopped sandbox", ErrConflict, sb.ID)
	}
	if err := sb.need(r, "started", StateStopped, StateFailed); err != nil {
		return err
	}
	switch {
	case r.Spec == nil:
		return fmt.Errorf("%w: sandbox %s was created by an agentbox that kept no domain description: it cannot be started again; create a new sandbox", ErrUnsupported, sb.ID)
	case opts.Image == nil:
		return fmt.Errorf("%w: start of sandbox %s: no image", ErrInvalid, sb.ID)
	case opts.Image.Digest != r.ImageDigest:
		return fmt.Errorf("%w: sandbox %s was created on image sha256:%s and %s now holds sha256:%s: its disk only works on that image; put it back or create a new sandbox", ErrCannotStart, sb.ID, r.ImageDigest, opts.Image.Dir, opts.Image.Digest)
	}
	if _, err := os.Stat(sb.Overlay); err != nil {
		return fmt.Errorf("%w: sandbox %s: its disk %s is gone (%v): create a new sandbox", ErrCannotStart, sb.ID, sb.Overlay, err)
	}
	m.unshare(sb) // its new domain maps no memory template (sharedmem.go)
	if err := m.reserve(sb, opts.Admit); err != nil {
		return err
	}
	defer m.unreserve(sb)
	// The saved state of a failed resume from disk, and any an
	// interrupted pause or resume left: a cold boot needs none of them.
	m.dropStaleSavedStates(ctx, sb, "", nil)
	sb.mu.Lock()
	sb.rec.Paused = nil
	sb.mu.Unlock()
	if err := sb.setState(StateCreating, "starting"); err != nil {
		return err
	}
	policy := sb.NetworkPolicy()
	m.teardownNetwork(ctx, sb) // leftovers of a failed sandbox
	timeout := opts.BootTimeout
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	b := m.rebuild(sb)
	if b.Spec.DiskBacking == "" { // a spec recorded before it existed: a cold boot may name it
		b.Spec.DiskBacking = opts.Image.Disk
	}
	err := b.Run(ctx, "start", stepLeftover(), StepNetwork(policy), StepDomain(m.cfg.Driver.StartDomain), StepAgent(timeout), StepRunning())
	if err != nil {
		sb.setState(StateFailed, "start failed: "+err.Error())
		return err
	}
	b.Done()
	sb.Touch()
	m.log.Debug("sandbox started again", "sandbox", sb.ID, "domain", sb.Domain, "boot_ms", sb.BootTime.Milliseconds())
	return nil
}

// rebuild returns a Build that brings the existing sandbox sb's domain
// back from its recorded spec (Resume from disk, Start), with a new life
// for the new domain.
func (m *pauseResume) rebuild(sb *Sandbox) *Build {
	sb.mu.Lock()
	spec := *sb.rec.Spec
	spec.MemoryBackend = spec.MemoryBackend.Private() // a clone's template RAM is not its to reuse
	sb.life = newLife()
	sb.mu.Unlock()
	return &Build{Sandbox: sb, Spec: spec, Undo: revert.New(), m: m.Manager}
}

// reserve admits sb's resources (with admit, if any) against what the
// other live sandboxes hold and counts them until unreserve, so
// concurrent resumes and creates cannot both pass a check only one fits.
func (m *pauseResume) reserve(sb *Sandbox, admit func(Resources) error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if admit != nil {
		r := m.requestLocked(sb) // sharedmem.go
		if err := admit(r); err != nil {
			return err
		}
	}
	sb.mu.Lock()
	sb.reserved = true
	sb.mu.Unlock()
	return nil
}

func (m *pauseResume) unreserve(sb *Sandbox) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb.mu.Lock()
	sb.reserved = false
	sb.mu.Unlock()
}

// stepLeftover ("leftover") destroys a domain of sb's name that an
// earlier run left (a daemon killed between a pause's save and its
// destroy, or mid-resume).
func stepLeftover() Step {
	return Step{Name: "leftover", Run: func(ctx context.Context, b *Build) error {
		return b.m.cfg.Driver.DestroyDomain(ctx, b.Sandbox.Domain)
	}}
}

// dropSavedState deletes the saved state p of sb (paused to disk) from
// its overlay, which no QEMU holds; a failure is logged (the state costs
// disk only).
func (m *pauseResume) dropSavedState(ctx context.Context, sb *Sandbox, p *PauseRecord) {
	if p == nil || !p.ToDisk || p.Tag == "" {
		return
	}
	if err := overlay.DeleteSnapshotOffline(context.WithoutCancel(ctx), p.File, p.Tag); err != nil && !errors.Is(err, overlay.ErrNoSnapshot) && !errors.Is(err, os.ErrNotExist) {
		m.log.Warn("delete the saved state of a paused sandbox", "sandbox", sb.ID, "tag", p.Tag, "err", err)
	}
}

// pauseTagRE matches the tags of saved states of pauses to disk ("p" and
// 12 hex digits, see Pause); snapshots ("s…") and warm templates never do.
var pauseTagRE = regexp.MustCompile(`^p[0-9a-f]{12}$`)

// dropStaleSavedStates deletes from sb's overlay every saved state of a
// pause to disk that its record does not name (keep is the one it names,
// or ""): those a daemon killed mid-pause (after the save, before the
// record said paused) or mid-resume (after the record said running,
// before the delete) left, each as large as the guest's memory. With
// live, the overlay is held by sb's running domain and the states are
// deleted through it; otherwise no QEMU holds it (qemu-img). Failures are
// logged: the states cost disk only.
func (m *pauseResume) dropStaleSavedStates(ctx context.Context, sb *Sandbox, keep string, live Snapshotter) {
	ctx = context.WithoutCancel(ctx)
	list, err := overlay.Snapshots(ctx, sb.Overlay)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			m.log.Warn("list the saved states in a sandbox's overlay", "sandbox", sb.ID, "err", err)
		}
		return
	}
	for _, o := range list {
		if !pauseTagRE.MatchString(o.Tag) || o.Tag == keep {
			continue
		}
		if live != nil {
			err = live.DeleteSnapshot(ctx, sb.Domain, o.Tag)
		} else {
			err = overlay.DeleteSnapshotOffline(ctx, sb.Overlay, o.Tag)
		}
		if err != nil {
			m.log.Warn("delete a saved state left by an interrupted pause or resume", "sandbox", sb.ID, "tag", o.Tag, "err", err)
			continue
		}
		m.log.Info("deleted a saved state left by an interrupted pause or resume", "sandbox", sb.ID, "tag", o.Tag)
	}
}

// StepLoad ("load") loads the saved state tag (what names it in errors)
// into the build's domain, started paused (StepDomain with
// Snapshotter.StartDomainPaused), and records Times.Start and Times.Load.
// Errors wrap ErrSnapshotUnusable. A restore and a resume from disk use
// it.
func StepLoad(snap Snapshotter, tag, what string) Step {
	return Step{Name: "load", Run: func(ctx context.Context, b *Build) error {
		b.Times.Start = time.Since(b.Started)
		t := time.Now()
		if err := snap.LoadSnapshot(ctx, b.Sandbox.Domain, tag); err != nil {
			return fmt.Errorf("%w: load %s into sandbox %s: %v: its file may be damaged", ErrSnapshotUnusable, what, b.Sandbox.ID, err)
		}
		b.Times.Load = time.Since(t)
		return nil
	}}
}

// StepResumeDomain ("resume") lets the loaded domain's vCPUs run and
// records Times.Resume.
func StepResumeDomain(snap Snapshotter) Step {
	return Step{Name: "resume", Run: func(ctx context.Context, b *Build) error {
		t := time.Now()
		if err := snap.ResumeDomain(ctx, b.Sandbox.Domain); err != nil {
			return fmt.Errorf("resume the loaded domain: %w", err)
		}
		b.Times.Resume = time.Since(t)
		return nil
	}}
}

// StepRefresh ("refresh") refreshes a guest that continues from a saved
// or paused state through the build's agent connection (RefreshGuest);
// an agent too old to reseed is logged, not fatal.
func StepRefresh() Step {
	return Step{Name: "refresh", Run: func(ctx context.Context, b *Build) error {
		err := RefreshGuest(ctx, b.Agent)
		if errors.Is(err, ErrReseedUnsupported) {
			b.m.log.Warn("resumed guest not reseeded", "sandbox", b.Sandbox.ID, "err", err)
			return nil
		}
		return err
	}}
}

// RefreshGuest is THE place where a guest that continues from a saved or
// paused state is brought up to date with the host: its clock is set to
// the host's (a restored kernel keeps the time of the save), and its
// random number generator gets fresh host randomness (ReseedGuest). A
// restore, a resume from disk and a resume in memory call it; a start of
// a stopped sandbox does not (a cold boot seeds its kernel afresh).
//
// Why every resume: memory saved to disk can be continued more than once
// — a daemon killed after a resume loaded the state but before it was
// deleted leaves the record paused, and the next resume loads the same
// state again, after the first run may have drawn (and sent) random
// numbers. A resume in memory continues its memory once; it is reseeded
// too (one agent round trip) so that "a guest that was paused has fresh
// randomness" holds without exceptions. The VM generation ID changes as
// well wherever a new domain starts (domain.Spec.GenID).
//
// Errors: the clock's; ErrReseedUnsupported (wrapped) from an agent that
// predates the reseed operation, after the clock was set: callers go on
// with a warning.
func RefreshGuest(ctx context.Context, c *agent.Client) error {
	if err := c.SetTime(ctx, time.Now()); err != nil {
		return fmt.Errorf("set the guest's clock: %w", err)
	}
	return ReseedGuest(ctx, c)
}
