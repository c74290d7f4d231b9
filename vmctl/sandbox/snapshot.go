package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/overlay"
)

// snapState is the Manager's snapshot registry: records by name, and the
// locks that serialize work on one qcow2 file (save, live delete, the
// copy of a restore) and the build of one warm template.
type snapState struct {
	mu     sync.Mutex
	loaded bool
	byName map[string]SnapshotRecord
	files  map[string]*sync.Mutex
	warm   map[string]*sync.Mutex

	// The warm pool (snapshot_warm.go): per template key, sandboxes
	// restored up to the loaded, paused domain.
	poolSize int
	poolShut bool
	// maxTemplates caps the warm templates (SetWarmTemplates).
	maxTemplates int
	pool         map[string][]*restoring
	refilling    map[string]bool
	refills      sync.WaitGroup
}

// fileLock returns the lock of one qcow2 file.
func (s *snapState) fileLock(path string) *sync.Mutex {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files = map[string]*sync.Mutex{}
	}
	l, ok := s.files[path]
	if !ok {
		l = &sync.Mutex{}
		s.files[path] = l
	}
	return l
}

// snapshotter returns the driver's Snapshotter or ErrUnsupported.
func (m *Manager) snapshotter() (Snapshotter, error) {
	s, ok := m.cfg.Driver.(Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: the %T driver cannot checkpoint domains: use the libvirt driver", ErrUnsupported, m.cfg.Driver)
	}
	return s, nil
}

// snapshotsDir holds the qcow2 files of removed sandboxes that still
// carry snapshots: STATE_DIR/snapshots/<sandbox ID>.qcow2.
func (m *Manager) snapshotsDir() string { return filepath.Join(m.cfg.StateDir, "snapshots") }

// snapLocked loads the records from the store on first use; call with
// m.snap.mu held.
func (m *Manager) snapLocked() error {
	if m.snap.loaded {
		return nil
	}
	m.snap.byName = map[string]SnapshotRecord{}
	if ss, ok := m.cfg.Store.(SnapshotStore); ok {
		recs, err := ss.Snapshots()
		if err != nil {
			return fmt.Errorf("load snapshot records: %w", err)
		}
		for _, r := range recs {
			m.snap.byName[r.Name] = r
		}
	}
	m.snap.loaded = true
	return nil
}

func (m *Manager) putSnapshot(r SnapshotRecord) error {
	if ss, ok := m.cfg.Store.(SnapshotStore); ok {
		if err := ss.PutSnapshot(r); err != nil {
			return fmt.Errorf("save snapshot record %s: %w", r.Name, err)
		}
	}
	m.snap.mu.Lock()
	m.snap.byName[r.Name] = r
	m.snap.mu.Unlock()
	return nil
}

func (m *Manager) dropSnapshot(r SnapshotRecord) error {
	m.snap.mu.Lock()
	delete(m.snap.byName, r.Name)
	m.snap.mu.Unlock()
	if ss, ok := m.cfg.Store.(SnapshotStore); ok {
		if err := ss.DeleteSnapshot(r.ID); err != nil {
			return fmt.Errorf("delete snapshot record %s: %w", r.Name, err)
		}
	}
	return nil
}

// Snapshots returns the snapshots, oldest first; with sandboxID != "" only
// those taken of that sandbox.
func (m *Manager) Snapshots(sandboxID string) ([]SnapshotRecord, error) {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	if err := m.snapLocked(); err != nil {
		return nil, err
	}
	var out []SnapshotRecord
	for _, r := range m.snap.byName {
		if sandboxID == "" || r.SandboxID == sandboxID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b SnapshotRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// Snapshot returns the snapshot with the given name or ID. Errors:
// ErrNoSnapshot.
func (m *Manager) Snapshot(ref string) (SnapshotRecord, error) {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	if err := m.snapLocked(); err != nil {
		return SnapshotRecord{}, err
	}
	if r, ok := m.snap.byName[ref]; ok {
		return r, nil
	}
	for _, r := range m.snap.byName {
		if r.ID == ref {
			return r, nil
		}
	}
	return SnapshotRecord{}, fmt.Errorf("%w: no snapshot %q: `agentbox snapshot ls` lists them", ErrNoSnapshot, ref)
}

// setSpec keeps the domain description the sandbox was started with, so
// that a snapshot of it can be restored with the same devices. Create
// calls it; the record carries it across daemon restarts.
func (sb *Sandbox) setSpec(spec domain.Spec) {
	sb.mu.Lock()
	sb.rec.Spec = &spec
	sb.mu.Unlock()
}

// SaveSnapshot checkpoints the running sandbox sb under the unique name
// (the caller checks its syntax): memory, device state and disk go into
// an internal snapshot of its overlay, tagged with the snapshot's ID
// (Snapshotter.SaveSnapshot); the sandbox keeps running. extra is kept
// with the record (SnapshotRecord.Extra).
//
// Errors: ErrUnsupported (driver, or a sandbox from before snapshots),
// ErrNotRunning, ErrSnapshotNameTaken, ErrNoSpace when the host's disk
// filled up (the sandbox keeps running, the partial snapshot is removed
// and no record is kept), the driver's error otherwise.
func (m *Manager) SaveSnapshot(ctx context.Context, sb *Sandbox, name string, extra []byte) (SnapshotRecord, error) {
	snap, err := m.snapshotter()
	if err != nil {
		return SnapshotRecord{}, err
	}
	if name == "" {
		return SnapshotRecord{}, fmt.Errorf("%w: a snapshot needs a name", ErrInvalid)
	}
	rec := sb.Record()
	if rec.State != StateRunning {
		return SnapshotRecord{}, fmt.Errorf("%w: sandbox %s is %s: only a running sandbox can be snapshotted (its memory is part of the snapshot); restore an older snapshot or create a new sandbox", ErrNotRunning, sb.ID, rec.State)
	}
	if rec.Spec == nil {
		return SnapshotRecord{}, fmt.Errorf("%w: sandbox %s was created by an agentbox without snapshot support: create a new sandbox to snapshot", ErrUnsupported, sb.ID)
	}
	id, err := newID()
	if err != nil {
		return SnapshotRecord{}, err
	}
	r := SnapshotRecord{
		ID: id, Name: name, Tag: "s" + id, SandboxID: sb.ID, SandboxName: sb.Name, File: sb.Overlay,
		ImageName: rec.ImageName, ImageDigest: rec.ImageDigest, ImageDir: rec.ImageDir,
		Accel: rec.Accel, DomainType: rec.DomainType, Machine: machineOf(*rec.Spec),
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Spec: *rec.Spec,
		Extra: append([]byte(nil), extra...),
	}
	if r.Source, err = json.Marshal(rec); err != nil {
		return SnapshotRecord{}, err
	}
	// Reserve the name.
	m.snap.mu.Lock()
	if err := m.snapLocked(); err != nil {
		m.snap.mu.Unlock()
		return SnapshotRecord{}, err
	}
	if other, ok := m.snap.byName[name]; ok {
		m.snap.mu.Unlock()
		return SnapshotRecord{}, fmt.Errorf("%w: snapshot %q already exists (of sandbox %s, %s): choose another name or remove it with `agentbox snapshot rm %s`", ErrSnapshotNameTaken, name, other.SandboxID, other.CreatedAt.Format(time.RFC3339), name)
	}
	m.snap.byName[name] = r // placeholder until the save ends
	m.snap.mu.Unlock()
	reserved := true
	defer func() {
		if reserved {
			m.snap.mu.Lock()
			if cur, ok := m.snap.byName[name]; ok && cur.ID == id {
				delete(m.snap.byName, name)
			}
			m.snap.mu.Unlock()
		}
	}()

	lock := m.snap.fileLock(sb.Overlay)
	lock.Lock()
	defer lock.Unlock()
	if sb.State() != StateRunning {
		return SnapshotRecord{}, sb.notRunning()
	}
	before := allocated(sb.Overlay)
	start := time.Now()
	if err := snap.SaveSnapshot(context.WithoutCancel(ctx), sb.Domain, r.Tag); err != nil {
		if noSpace(err, sb.Overlay) {
			return SnapshotRecord{}, fmt.Errorf("%w: snapshot %q of sandbox %s: %v; the sandbox keeps running and the partial snapshot was removed: free space under %s and retry", ErrNoSpace, name, sb.ID, err, filepath.Dir(sb.Overlay))
		}
		if sb.State() != StateRunning {
			return SnapshotRecord{}, errors.Join(fmt.Errorf("snapshot %q: %w", name, err), sb.notRunning())
		}
		return SnapshotRecord{}, fmt.Errorf("snapshot %q of sandbox %s: %w", name, sb.ID, err)
	}
	r.SaveMs = time.Since(start).Milliseconds()
	r.CreatedAt = time.Now().UTC()
	r.DiskBytes = max(allocated(sb.Overlay)-before, 0)
	if list, err := overlay.Snapshots(ctx, sb.Overlay); err == nil {
		for _, s := range list {
			if s.Tag == r.Tag {
				r.VMStateBytes = int64(s.VMStateSize)
			}
		}
	} else {
		m.log.Warn("list overlay snapshots", "sandbox", sb.ID, "err", err)
	}
	if err := m.putSnapshot(r); err != nil {
		if derr := snap.DeleteSnapshot(context.WithoutCancel(ctx), sb.Domain, r.Tag); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove the snapshot again: %w", derr))
		}
		return SnapshotRecord{}, err
	}
	reserved = false
	m.log.Debug("snapshot saved", "sandbox", sb.ID, "snapshot", name, "save_ms", r.SaveMs, "vmstate_bytes", r.VMStateBytes, "disk_bytes", r.DiskBytes)
	return r, nil
}

// DeleteSnapshot removes the snapshot with the given name or ID: its tag
// from the qcow2 file (live through the driver while the source sandbox
// runs, else with qemu-img) and its record; a file kept only for
// snapshots of a removed sandbox is deleted with its last snapshot. A tag
// already missing from the file is not an error (the record goes).
// Errors: ErrNoSnapshot, the driver's or qemu-img's error.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	ctx = context.WithoutCancel(ctx)
	r, err := m.Snapshot(ref)
	if err != nil {
		return err
	}
	lock := m.snap.fileLock(r.File)
	lock.Lock()
	defer lock.Unlock()
	if r, err = m.Snapshot(r.ID); err != nil {
		return err // deleted meanwhile
	}
	var src *Sandbox
	if sb, err := m.Get(r.SandboxID); err == nil && sb.Overlay == r.File {
		src = sb
	}
	kept := strings.HasPrefix(r.File, m.snapshotsDir()+string(os.PathSeparator))
	last := true
	for _, o := range m.allSnapshots() {
		if o.ID != r.ID && o.File == r.File {
			last = false
		}
	}
	switch {
	case kept && last:
		if err := os.Remove(r.File); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove snapshot file %s: %w", r.File, err)
		}
	case src != nil && src.State() == StateRunning:
		snap, err := m.snapshotter()
		if err != nil {
			return err
		}
		if err := snap.DeleteSnapshot(ctx, src.Domain, r.Tag); err != nil && !errors.Is(err, ErrNoSnapshot) {
			return fmt.Errorf("delete snapshot %q from sandbox %s: %w", r.Name, src.ID, err)
		}
	default:
		if _, err := os.Stat(r.File); err == nil {
			if err := overlay.DeleteSnapshotOffline(ctx, r.File, r.Tag); err != nil && !errors.Is(err, overlay.ErrNoSnapshot) {
				return fmt.Errorf("delete snapshot %q from %s: %w", r.Name, r.File, err)
			}
		}
	}
	return m.dropSnapshot(r)
}

// allSnapshots is Snapshots("") for internal use: a store that cannot be
// read yields none (the error surfaces on the next listing).
func (m *Manager) allSnapshots() []SnapshotRecord {
	all, _ := m.Snapshots("")
	return all
}

// keepSnapshotFile runs in Remove once sb's domain is gone: if snapshots
// live in sb's overlay, the overlay moves to STATE_DIR/snapshots/<ID>.qcow2
// and their records follow it, so they survive the sandbox.
func (m *Manager) keepSnapshotFile(sb *Sandbox) error {
	var mine []SnapshotRecord
	for _, r := range m.allSnapshots() {
		if r.File == sb.Overlay {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	lock := m.snap.fileLock(sb.Overlay)
	lock.Lock()
	defer lock.Unlock()
	if err := os.MkdirAll(m.snapshotsDir(), 0o700); err != nil {
		return fmt.Errorf("keep snapshots of sandbox %s: %w", sb.ID, err)
	}
	dst := filepath.Join(m.snapshotsDir(), sb.ID+".qcow2")
	if err := os.Rename(sb.Overlay, dst); err != nil {
		return fmt.Errorf("keep snapshots of sandbox %s: move its overlay: %w", sb.ID, err)
	}
	var errs []error
	for _, r := range mine {
		r.File = dst
		errs = append(errs, m.putSnapshot(r))
	}
	m.log.Debug("overlay kept for snapshots", "sandbox", sb.ID, "file", dst, "snapshots", len(mine))
	return errors.Join(errs...)
}

// reconcileSnapshots runs in Reconcile before its file cleanup: it loads
// the snapshot records, moves the overlay of a sandbox whose record is
// gone (a crash inside Remove) to STATE_DIR/snapshots when snapshots still
// live in it, and removes files in STATE_DIR/snapshots that no snapshot
// uses (a crash inside DeleteSnapshot).
func (m *Manager) reconcileSnapshots(known map[string]bool, rep *Report) {
	recs, err := m.Snapshots("")
	if err != nil {
		m.log.Warn("load snapshot records", "err", err)
		return
	}
	used := map[string]bool{}
	for _, r := range recs {
		if !known[r.SandboxID] && r.File == filepath.Join(m.cfg.StateDir, "sandboxes", r.SandboxID, "overlay.qcow2") {
			if err := m.keepSnapshotFile(&Sandbox{ID: r.SandboxID, Overlay: r.File}); err != nil {
				m.log.Warn("keep snapshot file", "snapshot", r.Name, "err", err)
			}
			r, _ = m.Snapshot(r.ID)
		}
		used[r.File] = true
	}
	entries, _ := os.ReadDir(m.snapshotsDir())
	for _, e := range entries {
		p := filepath.Join(m.snapshotsDir(), e.Name())
		if used[p] {
			continue
		}
		if err := os.Remove(p); err == nil {
			rep.Cleaned = append(rep.Cleaned, "snapshot file "+p)
			m.log.Warn("removed a snapshot file no snapshot uses", "path", p)
		}
	}
}

// RestoreOptions describe the sandbox a restore makes.
type RestoreOptions struct {
	// Image is the snapshot's image, loaded (and verified) by the caller
	// from SnapshotRecord.ImageDir; its digest must equal the snapshot's.
	// Required.
	Image *image.Image
	// Name, Labels, Extra and Admit are as in Options.
	Name   string
	Labels map[string]string
	Extra  []byte
	Admit  func(r Resources) error
	// Timeout bounds the time from the domain's resume to the agent's
	// handshake; 0 means 60 s.
	Timeout time.Duration
}

// Restore starts a NEW sandbox that continues from the snapshot with the
// given name or ID: it copies the snapshot's qcow2 file (pausing the
// source sandbox during the copy if it runs, so QEMU has flushed it),
// starts a domain of the same shape paused, loads the snapshot, resumes
// it, reconnects the guest agent, sets the guest's clock to the host's and
// gives the guest its own identity (hostname = the new domain name, a new
// /etc/machine-id if the image has one; its own tap and addresses, but
// the source's MAC, which the NIC's saved state keeps: see keepGuestMAC).
// Restoring one snapshot twice gives two independent sandboxes.
//
// Errors: ErrNoSnapshot; ErrSnapshotUnusable when the image changed or the
// file is gone or corrupt; ErrNameTaken; ErrNoSpace; the admission error;
// ErrGuestDied/ErrBootTimeout when the restored guest does not answer. On
// any error nothing is left (domain, overlay copy, record).
func (m *Manager) Restore(ctx context.Context, ref string, opts RestoreOptions) (*Sandbox, error) {
	if _, err := m.snapshotter(); err != nil {
		return nil, err
	}
	r, err := m.Snapshot(ref)
	if err != nil {
		return nil, err
	}
	if opts.Image == nil {
		return nil, fmt.Errorf("%w: restore of %q: no image", ErrInvalid, r.Name)
	}
	if opts.Image.Digest != r.ImageDigest {
		return nil, fmt.Errorf("%w: snapshot %q was taken on image %s (sha256:%s) and %s now holds sha256:%s: a snapshot only restores onto the exact image it was taken on; put that image back or remove the snapshot", ErrSnapshotUnusable, r.Name, r.ImageName, r.ImageDigest, r.ImageDir, opts.Image.Digest)
	}
	if _, err := os.Stat(r.File); err != nil {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s is gone (%v): remove the snapshot with `agentbox snapshot rm %s`", ErrSnapshotUnusable, r.Name, r.File, err, r.Name)
	}
	// The file must read as qcow2 and still hold the tag (qemu-img shares
	// the lock of a running source).
	tags, err := overlay.Snapshots(ctx, r.File)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s is damaged: %v: remove the snapshot with `agentbox snapshot rm %s`", ErrSnapshotUnusable, r.Name, r.File, err, r.Name)
	}
	if !slices.ContainsFunc(tags, func(s overlay.Snapshot) bool { return s.Tag == r.Tag }) {
		return nil, fmt.Errorf("%w: snapshot %q: its file %s no longer holds tag %s: remove the snapshot with `agentbox snapshot rm %s`", ErrSnapshotUnusable, r.Name, r.File, r.Tag, r.Name)
	}
	var base Record
	if len(r.Source) > 0 {
		if err := json.Unmarshal(r.Source, &base); err != nil {
			return nil, fmt.Errorf("%w: snapshot %q: its record is unreadable: %v", ErrSnapshotUnusable, r.Name, err)
		}
	}
	src := restoreSource{
		name: r.Name, file: r.File, tag: r.Tag, spec: r.Spec, base: base,
		accel: accel.Choice{DomainType: r.DomainType, Accel: accel.Mode(r.Accel), Reason: "restored from snapshot " + r.Name},
		vcpus: r.VCPUs, memory: r.MemoryMiB,
	}
	if sb, err := m.Get(r.SandboxID); err == nil && sb.Overlay == r.File {
		src.running = sb
	}
	return m.restore(ctx, src, opts)
}

// restoreSource is what restore starts from: a tag in a qcow2 file and
// the domain description it was saved with.
type restoreSource struct {
	name    string // for messages
	file    string
	tag     string
	spec    domain.Spec
	accel   accel.Choice
	vcpus   int
	memory  int
	running *Sandbox // the source sandbox while its domain holds file, or nil
	// base is the source sandbox's record when the snapshot was taken:
	// the restored record starts from it, so what other parts of the
	// manager keep there (resources, network policy) carries over.
	base Record
}

// RestoreTimes break a restore's duration down (for logs and benchmarks).
type RestoreTimes struct {
	// Copy is the copy of the qcow2 file; SourcePause the part of it the
	// source sandbox was paused for (0 when it did not run).
	Copy, SourcePause time.Duration
	// Start, Load and Resume are the paused domain start, the snapshot
	// load and the resume; Agent the handshake, clock and identity.
	Start, Load, Resume, Agent time.Duration
}

// LastRestore returns the step times of sb's restore (zero for a sandbox
// that was booted).
func (sb *Sandbox) LastRestore() RestoreTimes {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.restoreTimes
}

func (m *Manager) restore(ctx context.Context, src restoreSource, opts RestoreOptions) (_ *Sandbox, err error) {
	r, err := m.newRestoring(src, opts.Image)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if rerr := r.undo.run(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := m.admitRestoring(r, opts); err != nil {
		return nil, err
	}
	if err := m.prepareRestoring(ctx, r); err != nil {
		return nil, err
	}
	return m.finishRestoring(ctx, r, opts)
}

// restoring is a sandbox on its way from a snapshot: made by
// newRestoring, admitted (registry, record) by admitRestoring, its domain
// started paused with the snapshot loaded by prepareRestoring (a warm
// pool keeps sandboxes in that state, not admitted yet), and resumed and
// connected by finishRestoring. undo removes whatever was made.
type restoring struct {
	sb    *Sandbox
	src   restoreSource
	spec  domain.Spec
	times RestoreTimes
	start time.Time // the paused domain's start
	undo  revert
}

func (m *Manager) newRestoring(src restoreSource, img *image.Image) (*restoring, error) {
	id, err := newID()
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{
		ID: id, Domain: DomainPrefix + id,
		Dir: filepath.Join(m.cfg.StateDir, "sandboxes", id), Image: img, Accel: src.accel,
		VCPUs: src.vcpus, Memory: src.memory, mgr: m, stopped: make(chan struct{}),
	}
	sb.Overlay = filepath.Join(sb.Dir, "overlay.qcow2")
	sb.ConsoleLog = filepath.Join(sb.Dir, "console.log")
	sb.AgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".sock")
	if src.spec.GuestAgentSocket != "" {
		sb.GuestAgentSocket = filepath.Join(m.cfg.RuntimeDir, id+".qga.sock")
	}
	sb.rec = src.base
	sb.rec.ID, sb.rec.Name, sb.rec.State, sb.rec.Reason, sb.rec.Domain = id, "", StateCreating, "", sb.Domain
	sb.rec.ImageName, sb.rec.ImageDigest, sb.rec.ImageDir = img.Manifest.Name, img.Digest, img.Dir
	sb.rec.Accel, sb.rec.DomainType = string(src.accel.Accel), src.accel.DomainType
	sb.rec.VCPUs, sb.rec.MemoryMiB, sb.rec.Labels = sb.VCPUs, sb.Memory, nil
	sb.rec.Dir, sb.rec.Overlay, sb.rec.ConsoleLog, sb.rec.AgentSocket = sb.Dir, sb.Overlay, sb.ConsoleLog, sb.AgentSocket
	sb.rec.CreatedAt, sb.rec.StartedAt, sb.rec.StoppedAt, sb.rec.BootMs = time.Now().UTC(), time.Time{}, time.Time{}, 0
	sb.rec.Extra, sb.rec.Spec, sb.rec.Network = nil, nil, nil
	sb.rec.Resources = sb.rec.Resources.forRestore() // our own copy, without the source's enforcement and cgroups
	return &restoring{sb: sb, src: src}, nil
}

// admitRestoring gives r its name, labels and extra, registers it (name
// reserved, admission checked) and writes its record.
func (m *Manager) admitRestoring(r *restoring, opts RestoreOptions) error {
	sb := r.sb
	sb.Name, sb.Labels = opts.Name, maps.Clone(opts.Labels)
	sb.mu.Lock()
	sb.rec.Name, sb.rec.Labels, sb.rec.Extra = sb.Name, sb.Labels, append([]byte(nil), opts.Extra...)
	sb.rec.CreatedAt = time.Now().UTC()
	sb.mu.Unlock()
	if err := m.register(sb, opts.Admit); err != nil {
		return err
	}
	r.undo.add("registry", func(context.Context) error { m.unregister(sb); return nil })
	if err := m.store(sb.Record()); err != nil {
		return err
	}
	r.undo.add("record", func(context.Context) error { return m.unstore(sb.ID) })
	return nil
}

// prepareRestoring copies the snapshot's file, gives r its network and
// starts its domain paused with the snapshot loaded.
func (m *Manager) prepareRestoring(ctx context.Context, r *restoring) error {
	snap, err := m.snapshotter()
	if err != nil {
		return err
	}
	sb, src := r.sb, r.src
	if err := os.MkdirAll(filepath.Dir(sb.Dir), 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	if err := os.Mkdir(sb.Dir, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	r.undo.add("sandbox dir", func(context.Context) error { return os.RemoveAll(sb.Dir) })
	if err := m.copySnapshotFile(ctx, src, sb.Overlay, &r.times); err != nil {
		return err
	}

	// The domain, paused, with the source's devices and our own paths.
	spec := src.spec
	spec.Name, spec.SandboxID, spec.Owner = sb.Domain, sb.ID, m.cfg.Owner
	spec.Image = sb.Image.Digest
	spec.Disk, spec.AgentSocket, spec.ConsoleLog = sb.Overlay, sb.AgentSocket, sb.ConsoleLog
	spec.GuestAgentSocket = sb.GuestAgentSocket
	spec.UUID = ""
	spec.Cmdline = hostnameRE.ReplaceAllString(spec.Cmdline, "agentbox.hostname="+sb.Domain)
	// The source's network policy on a network of our own (same device
	// set: a NIC exactly when the source had one).
	if err := m.attachNetwork(ctx, sb, src.policy(), &spec, &r.undo); err != nil {
		return err
	}
	keepGuestMAC(sb, src.spec, &spec) // the NIC's saved state keeps the source's MAC
	if err := m.watch(sb); err != nil {
		return err
	}
	r.undo.add("domain watch", func(context.Context) error { sb.stopWatch(); return nil })
	r.start = time.Now()
	// The limits as Create sets them (resources.go): the XML's share, with
	// libvirt's memlock failure remembered, and the cgroups' after the start.
	spec.Tune = m.tune(sb, spec.Type)
	if err := m.startDomainWith(ctx, sb, &spec, snap.StartDomainPaused); err != nil {
		return fmt.Errorf("start domain paused: %w", err)
	}
	r.undo.add("domain", func(ctx context.Context) error {
		err := m.cfg.Driver.DestroyDomain(ctx, sb.Domain)
		removeFiles(sb.AgentSocket, sb.GuestAgentSocket)
		sb.releaseResources() // the cgroups agentbox made (pids on v1), as Create's revert does
		return err
	})
	m.applyResources(ctx, sb)
	r.times.Start = time.Since(r.start)
	t := time.Now()
	if err := snap.LoadSnapshot(ctx, sb.Domain, src.tag); err != nil {
		return fmt.Errorf("%w: load snapshot %q into sandbox %s: %v: the snapshot's file may be damaged; remove the snapshot", ErrSnapshotUnusable, src.name, sb.ID, err)
	}
	r.times.Load = time.Since(t)
	r.spec = spec
	return nil
}

// finishRestoring resumes r's loaded domain, reconnects the agent, sets
// the guest's clock and identity, and marks the sandbox running.
func (m *Manager) finishRestoring(ctx context.Context, r *restoring, opts RestoreOptions) (*Sandbox, error) {
	snap, err := m.snapshotter()
	if err != nil {
		return nil, err
	}
	sb := r.sb
	t := time.Now()
	if err := snap.ResumeDomain(ctx, sb.Domain); err != nil {
		return nil, fmt.Errorf("resume restored domain: %w", err)
	}
	r.times.Resume = time.Since(t)

	// The agent: a new hello ends the session the guest was in when the
	// snapshot was taken (see vmctl/guestagent's sessionConn).
	t = time.Now()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	client, err := sb.connectAgent(ctx, timeout)
	if err != nil {
		return nil, err
	}
	r.undo.add("agent", func(context.Context) error { return client.Close() })
	if err := client.SetTime(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("set the restored guest's clock: %w", err)
	}
	machineID, err := newMachineID()
	if err != nil {
		return nil, err
	}
	if _, err := client.SetIdentity(ctx, sb.Domain, machineID); err != nil {
		return nil, fmt.Errorf("give the restored guest its identity: %w", err)
	}
	r.times.Agent = time.Since(t)
	sb.BootTime = time.Since(r.start)
	spec := r.spec
	sb.mu.Lock()
	sb.agent = client
	sb.rec.BootMs = sb.BootTime.Milliseconds()
	sb.rec.Spec = &spec
	sb.restoreTimes = r.times
	sb.mu.Unlock()
	if err := sb.setState(StateRunning, ""); err != nil {
		return nil, err
	}
	r.undo.release()
	// The guest still has its source's addresses: give it its own (the
	// NIC keeps the source's MAC in its migrated state, hence anyMAC).
	if err := sb.ConfigureGuestNetwork(ctx, true); err != nil {
		return nil, errors.Join(fmt.Errorf("configure the restored guest's network: %w", err), m.Remove(ctx, sb, true))
	}
	m.log.Debug("sandbox restored", "sandbox", sb.ID, "domain", sb.Domain, "snapshot", r.src.name,
		"copy_ms", r.times.Copy.Milliseconds(), "source_pause_ms", r.times.SourcePause.Milliseconds(),
		"start_ms", r.times.Start.Milliseconds(), "load_ms", r.times.Load.Milliseconds(),
		"resume_ms", r.times.Resume.Milliseconds(), "agent_ms", r.times.Agent.Milliseconds())
	return sb, nil
}

var hostnameRE = regexp.MustCompile(`agentbox\.hostname=\S*`)

// copySnapshotFile copies src's qcow2 file to dst (reflink where the
// filesystem has it). A running source is paused for the copy: QMP stop
// drains and flushes its block I/O, so the copy is consistent.
func (m *Manager) copySnapshotFile(ctx context.Context, src restoreSource, dst string, times *RestoreTimes) (err error) {
	lock := m.snap.fileLock(src.file)
	lock.Lock()
	defer lock.Unlock()
	start := time.Now()
	if sb := src.running; sb != nil && sb.State() == StateRunning {
		snap, err := m.snapshotter()
		if err != nil {
			return err
		}
		if err := snap.PauseDomain(ctx, sb.Domain); err != nil {
			return fmt.Errorf("pause source sandbox %s for the copy: %w", sb.ID, err)
		}
		defer func() {
			if rerr := snap.ResumeDomain(context.WithoutCancel(ctx), sb.Domain); rerr != nil {
				err = errors.Join(err, fmt.Errorf("resume source sandbox %s: %w", sb.ID, rerr))
			}
			times.SourcePause = time.Since(start)
		}()
	}
	if err := overlay.Copy(ctx, src.file, dst); err != nil {
		if noSpace(err, dst) {
			return fmt.Errorf("%w: copy snapshot %q: %v: free space under %s and retry", ErrNoSpace, src.name, err, filepath.Dir(dst))
		}
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: snapshot %q: its file %s is gone: remove the snapshot", ErrSnapshotUnusable, src.name, src.file)
		}
		return fmt.Errorf("copy snapshot %q: %w", src.name, err)
	}
	times.Copy = time.Since(start)
	return nil
}

// allocated returns the bytes the file takes on disk (st_blocks × 512),
// 0 if it cannot be read.
func allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

// noSpace reports whether err is, or the file system under path shows, a
// full disk: QEMU's job error carries the strerror text, not an errno.
func noSpace(err error, path string) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, ErrNoSpace) || strings.Contains(err.Error(), "No space left on device") {
		return true
	}
	var fs syscall.Statfs_t
	if syscall.Statfs(filepath.Dir(path), &fs) == nil {
		return int64(fs.Bavail)*int64(fs.Bsize) < 1<<20
	}
	return false
}

// machineOf returns the spec's QEMU machine type, resolving the default.
func machineOf(s domain.Spec) string {
	if s.Machine != "" {
		return s.Machine
	}
	return domain.DefaultMachine
}

// newMachineID returns a random systemd machine id: 32 lowercase hex
// digits (machine-id(5)).
func newMachineID() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// policy is the network policy the restored sandbox gets: its source's.
func (s restoreSource) policy() netpolicy.Policy {
	if s.base.Network != nil {
		return s.base.Network.Policy
	}
	return netpolicy.Policy{}
}
