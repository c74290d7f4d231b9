// Package snapshot saves running sandboxes into internal snapshots of
// their qcow2 overlay, restores new sandboxes from them, deletes them, and
// keeps their records (sandbox.SnapshotRecord, in the manager's Store when
// it is a sandbox.SnapshotStore). It builds on the sandbox core: a restore
// is a list of sandbox.Steps on a sandbox.Build, and the core's Remove and
// Reconcile call its hooks so snapshots outlive their sandbox.
package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/overlay"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// Service saves, restores and deletes the snapshots of one Manager's
// sandboxes and keeps their records: by name, loaded from the Store on
// first use. It is safe for concurrent use.
type Service struct {
	m   *sandbox.Manager
	cfg sandbox.Config
	log *slog.Logger

	mu     sync.Mutex
	loaded bool
	byName map[string]sandbox.SnapshotRecord
	files  map[string]*sync.Mutex // serialize work on one qcow2 file (save, live delete, a restore's copy)
}

// New returns the snapshot service of m and hooks it into m's Remove (the
// overlay of a removed sandbox that holds snapshots moves to
// STATE_DIR/snapshots/<ID>.qcow2) and Reconcile (loads the records, keeps
// or removes files a crash left). Call it once per Manager, before
// Reconcile.
func New(m *sandbox.Manager) *Service {
	cfg := m.Config()
	s := &Service{m: m, cfg: cfg, log: cfg.Logger}
	m.AddHooks(sandbox.Hooks{
		Removing: func(sb *sandbox.Sandbox) error { return s.keepFile(sb.ID, sb.Overlay) },
		Reconciling: func(ctx context.Context, known map[string]bool, rep *sandbox.Report) {
			s.reconcile(known, rep)
		},
	})
	return s
}

// FileLock returns the lock of one path: a qcow2 file, held while it is
// saved into, copied or deleted from (the warm templates' files too), or a
// warm template's directory, held while it is built or removed.
func (s *Service) FileLock(path string) *sync.Mutex {
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

// Snapshotter returns the manager's driver as a sandbox.Snapshotter, or
// sandbox.ErrUnsupported.
func (s *Service) Snapshotter() (sandbox.Snapshotter, error) {
	snap, ok := s.cfg.Driver.(sandbox.Snapshotter)
	if !ok {
		return nil, fmt.Errorf("%w: the %T driver cannot checkpoint domains: use the libvirt driver", sandbox.ErrUnsupported, s.cfg.Driver)
	}
	return snap, nil
}

// dir holds the qcow2 files of removed sandboxes that still carry
// snapshots: STATE_DIR/snapshots/<sandbox ID>.qcow2.
func (s *Service) dir() string { return filepath.Join(s.cfg.StateDir, "snapshots") }

// loadLocked loads the records from the store on first use; call with
// s.mu held.
func (s *Service) loadLocked() error {
	if s.loaded {
		return nil
	}
	s.byName = map[string]sandbox.SnapshotRecord{}
	if ss, ok := s.cfg.Store.(sandbox.SnapshotStore); ok {
		recs, err := ss.Snapshots()
		if err != nil {
			return fmt.Errorf("load snapshot records: %w", err)
		}
		for _, r := range recs {
			s.byName[r.Name] = r
		}
	}
	s.loaded = true
	return nil
}

func (s *Service) put(r sandbox.SnapshotRecord) error {
	if ss, ok := s.cfg.Store.(sandbox.SnapshotStore); ok {
		if err := ss.PutSnapshot(r); err != nil {
			return fmt.Errorf("save snapshot record %s: %w", r.Name, err)
		}
	}
	s.mu.Lock()
	s.byName[r.Name] = r
	s.mu.Unlock()
	return nil
}

func (s *Service) drop(r sandbox.SnapshotRecord) error {
	s.mu.Lock()
	delete(s.byName, r.Name)
	s.mu.Unlock()
	if ss, ok := s.cfg.Store.(sandbox.SnapshotStore); ok {
		if err := ss.DeleteSnapshot(r.ID); err != nil {
			return fmt.Errorf("delete snapshot record %s: %w", r.Name, err)
		}
	}
	return nil
}

// List returns the snapshots, oldest first; with sandboxID != "" only
// those taken of that sandbox.
func (s *Service) List(sandboxID string) ([]sandbox.SnapshotRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return nil, err
	}
	var out []sandbox.SnapshotRecord
	for _, r := range s.byName {
		if sandboxID == "" || r.SandboxID == sandboxID {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.SnapshotRecord) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

// Get returns the snapshot with the given name or ID. Errors:
// sandbox.ErrNoSnapshot.
func (s *Service) Get(ref string) (sandbox.SnapshotRecord, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(); err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	if r, ok := s.byName[ref]; ok {
		return r, nil
	}
	for _, r := range s.byName {
		if r.ID == ref {
			return r, nil
		}
	}
	return sandbox.SnapshotRecord{}, fmt.Errorf("%w: no snapshot %q: `agentbox snapshot ls` lists them", sandbox.ErrNoSnapshot, ref)
}

// saveHint says what to do about a sandbox in state st that cannot be
// snapshotted: a paused one is resumed first (the save runs live, on a
// running guest: a paused machine is not snapshotted); a stopped one is
// started again.
func saveHint(sb *sandbox.Sandbox, st sandbox.State) string {
	ref := sb.ID
	if sb.Name != "" {
		ref = sb.Name
	}
	switch {
	case st == sandbox.StatePaused:
		return fmt.Sprintf("resume it first (agentbox resume %s), then snapshot it", ref)
	case st.Final():
		return fmt.Sprintf("start it again (agentbox start %s) and snapshot it then, or restore an older snapshot", ref)
	}
	return "wait until it runs"
}

// Save checkpoints the running sandbox sb under the unique name (the
// caller checks its syntax): memory, device state and disk go into an
// internal snapshot of its overlay, tagged with the snapshot's ID
// (Snapshotter.SaveSnapshot); the sandbox keeps running. extra is kept
// with the record (SnapshotRecord.Extra).
//
// Errors: sandbox.ErrUnsupported (driver, or a sandbox from before
// snapshots), ErrNotRunning, ErrSnapshotNameTaken, ErrNoSpace when the
// host's disk filled up (the sandbox keeps running, the partial snapshot
// is removed and no record is kept), the driver's error otherwise.
func (s *Service) Save(ctx context.Context, sb *sandbox.Sandbox, name string, extra []byte) (sandbox.SnapshotRecord, error) {
	snap, err := s.Snapshotter()
	if err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	if name == "" {
		return sandbox.SnapshotRecord{}, fmt.Errorf("%w: a snapshot needs a name", sandbox.ErrInvalid)
	}
	rec := sb.Record()
	if rec.State != sandbox.StateRunning {
		return sandbox.SnapshotRecord{}, fmt.Errorf("%w: sandbox %s is %s: only a running sandbox can be snapshotted (its memory is part of the snapshot); %s", sandbox.ErrNotRunning, sb.ID, rec.State, saveHint(sb, rec.State))
	}
	if rec.Spec == nil {
		return sandbox.SnapshotRecord{}, fmt.Errorf("%w: sandbox %s was created by an agentbox without snapshot support: create a new sandbox to snapshot", sandbox.ErrUnsupported, sb.ID)
	}
	id, err := sandbox.NewID()
	if err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	r := sandbox.SnapshotRecord{
		ID: id, Name: name, Tag: "s" + id, SandboxID: sb.ID, SandboxName: sb.Name, File: sb.Overlay,
		ImageName: rec.ImageName, ImageDigest: rec.ImageDigest, ImageDir: rec.ImageDir,
		Accel: rec.Accel, DomainType: rec.DomainType, Machine: machineOf(*rec.Spec),
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Spec: *rec.Spec,
		Extra: append([]byte(nil), extra...), Tenant: rec.Tenant,
	}
	if r.Source, err = json.Marshal(rec); err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	// Reserve the name.
	s.mu.Lock()
	if err := s.loadLocked(); err != nil {
		s.mu.Unlock()
		return sandbox.SnapshotRecord{}, err
	}
	if other, ok := s.byName[name]; ok {
		s.mu.Unlock()
		return sandbox.SnapshotRecord{}, fmt.Errorf("%w: snapshot %q already exists (of sandbox %s, %s): choose another name or remove it with `agentbox snapshot rm %s`", sandbox.ErrSnapshotNameTaken, name, other.SandboxID, other.CreatedAt.Format(time.RFC3339), name)
	}
	s.byName[name] = r // placeholder until the save ends
	s.mu.Unlock()
	reserved := true
	defer func() {
		if reserved {
			s.mu.Lock()
			if cur, ok := s.byName[name]; ok && cur.ID == id {
				delete(s.byName, name)
			}
			s.mu.Unlock()
		}
	}()

	lock := s.FileLock(sb.Overlay)
	lock.Lock()
	defer lock.Unlock()
	if sb.State() != sandbox.StateRunning {
		return sandbox.SnapshotRecord{}, sb.NotRunning()
	}
	before := Allocated(sb.Overlay)
	start := time.Now()
	if err := snap.SaveSnapshot(context.WithoutCancel(ctx), sb.Domain, r.Tag); err != nil {
		if NoSpace(err, sb.Overlay) {
			return sandbox.SnapshotRecord{}, fmt.Errorf("%w: snapshot %q of sandbox %s: %v; the sandbox keeps running and the partial snapshot was removed: free space under %s and retry", sandbox.ErrNoSpace, name, sb.ID, err, filepath.Dir(sb.Overlay))
		}
		if sb.State() != sandbox.StateRunning {
			return sandbox.SnapshotRecord{}, errors.Join(fmt.Errorf("snapshot %q: %w", name, err), sb.NotRunning())
		}
		return sandbox.SnapshotRecord{}, fmt.Errorf("snapshot %q of sandbox %s: %w", name, sb.ID, err)
	}
	r.SaveMs = time.Since(start).Milliseconds()
	r.CreatedAt = time.Now().UTC()
	r.DiskBytes = max(Allocated(sb.Overlay)-before, 0)
	if list, err := overlay.Snapshots(ctx, sb.Overlay); err == nil {
		for _, o := range list {
			if o.Tag == r.Tag {
				r.VMStateBytes = int64(o.VMStateSize)
			}
		}
	} else {
		s.log.Warn("list overlay snapshots", "sandbox", sb.ID, "err", err)
	}
	if err := s.put(r); err != nil {
		if derr := snap.DeleteSnapshot(context.WithoutCancel(ctx), sb.Domain, r.Tag); derr != nil {
			err = errors.Join(err, fmt.Errorf("remove the snapshot again: %w", derr))
		}
		return sandbox.SnapshotRecord{}, err
	}
	reserved = false
	s.log.Debug("snapshot saved", "sandbox", sb.ID, "snapshot", name, "save_ms", r.SaveMs, "vmstate_bytes", r.VMStateBytes, "disk_bytes", r.DiskBytes)
	return r, nil
}

// Delete removes the snapshot with the given name or ID: its tag from the
// qcow2 file (live through the driver while the source sandbox runs, else
// with qemu-img) and its record; a file kept only for snapshots of a
// removed sandbox is deleted with its last snapshot. A tag already missing
// from the file is not an error (the record goes). Errors:
// sandbox.ErrNoSnapshot, the driver's or qemu-img's error.
func (s *Service) Delete(ctx context.Context, ref string) error {
	ctx = context.WithoutCancel(ctx)
	r, err := s.Get(ref)
	if err != nil {
		return err
	}
	lock := s.FileLock(r.File)
	lock.Lock()
	defer lock.Unlock()
	if r, err = s.Get(r.ID); err != nil {
		return err // deleted meanwhile
	}
	var src *sandbox.Sandbox
	if sb, err := s.m.Get(r.SandboxID); err == nil && sb.Overlay == r.File {
		src = sb
	}
	kept := strings.HasPrefix(r.File, s.dir()+string(os.PathSeparator))
	last := true
	for _, o := range s.all() {
		if o.ID != r.ID && o.File == r.File {
			last = false
		}
	}
	switch {
	case kept && last:
		if err := os.Remove(r.File); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove snapshot file %s: %w", r.File, err)
		}
	case src != nil && src.State() == sandbox.StateRunning:
		snap, err := s.Snapshotter()
		if err != nil {
			return err
		}
		if err := snap.DeleteSnapshot(ctx, src.Domain, r.Tag); err != nil && !errors.Is(err, sandbox.ErrNoSnapshot) {
			return fmt.Errorf("delete snapshot %q from sandbox %s: %w", r.Name, src.ID, err)
		}
	default:
		if _, err := os.Stat(r.File); err == nil {
			if err := overlay.DeleteSnapshotOffline(ctx, r.File, r.Tag); err != nil && !errors.Is(err, overlay.ErrNoSnapshot) {
				return fmt.Errorf("delete snapshot %q from %s: %w", r.Name, r.File, err)
			}
		}
	}
	return s.drop(r)
}

// all is List("") for internal use: a store that cannot be read yields
// none (the error surfaces on the next listing).
func (s *Service) all() []sandbox.SnapshotRecord {
	all, _ := s.List("")
	return all
}

// keepFile runs in the manager's Remove once the domain of sandbox id is
// gone: if snapshots live in its overlay, the overlay moves to
// STATE_DIR/snapshots/<ID>.qcow2 and their records follow it, so they
// survive the sandbox.
func (s *Service) keepFile(id, overlayPath string) error {
	var mine []sandbox.SnapshotRecord
	for _, r := range s.all() {
		if r.File == overlayPath {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	lock := s.FileLock(overlayPath)
	lock.Lock()
	defer lock.Unlock()
	if err := os.MkdirAll(s.dir(), 0o700); err != nil {
		return fmt.Errorf("keep snapshots of sandbox %s: %w", id, err)
	}
	dst := filepath.Join(s.dir(), id+".qcow2")
	if err := os.Rename(overlayPath, dst); err != nil {
		return fmt.Errorf("keep snapshots of sandbox %s: move its overlay: %w", id, err)
	}
	if err := s.m.Reclaim(dst); err != nil { // no longer its QEMU user's
		return fmt.Errorf("keep snapshots of sandbox %s: %w", id, err)
	}
	var errs []error
	for _, r := range mine {
		r.File = dst
		errs = append(errs, s.put(r))
	}
	s.log.Debug("overlay kept for snapshots", "sandbox", id, "file", dst, "snapshots", len(mine))
	return errors.Join(errs...)
}

// reconcile runs in the manager's Reconcile before its file cleanup: it
// loads the snapshot records, moves the overlay of a sandbox whose record
// is gone (a crash inside Remove) to STATE_DIR/snapshots when snapshots
// still live in it, and removes files in STATE_DIR/snapshots that no
// snapshot uses (a crash inside Delete).
func (s *Service) reconcile(known map[string]bool, rep *sandbox.Report) {
	recs, err := s.List("")
	if err != nil {
		s.log.Warn("load snapshot records", "err", err)
		return
	}
	used := map[string]bool{}
	for _, r := range recs {
		if !known[r.SandboxID] && r.File == filepath.Join(sandbox.SandboxesDir(s.cfg.StateDir), r.SandboxID, "overlay.qcow2") {
			if err := s.keepFile(r.SandboxID, r.File); err != nil {
				s.log.Warn("keep snapshot file", "snapshot", r.Name, "err", err)
			}
			r, _ = s.Get(r.ID)
		}
		used[r.File] = true
	}
	entries, _ := os.ReadDir(s.dir())
	for _, e := range entries {
		p := filepath.Join(s.dir(), e.Name())
		if used[p] {
			continue
		}
		if err := os.Remove(p); err == nil {
			rep.Cleaned = append(rep.Cleaned, "snapshot file "+p)
			s.log.Warn("removed a snapshot file no snapshot uses", "path", p)
		}
	}
}

// Allocated returns the bytes the file takes on disk (st_blocks × 512),
// 0 if it cannot be read.
func Allocated(path string) int64 { return overlay.Allocated(path) }

// NoSpace reports whether err is, or the file system under path shows, a
// full disk: QEMU's job error carries the strerror text, not an errno.
func NoSpace(err error, path string) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, sandbox.ErrNoSpace) || strings.Contains(err.Error(), "No space left on device") {
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
