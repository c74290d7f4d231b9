package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/image"
)

// DefaultWarmTemplates is how many warm templates a manager keeps when
// SetWarmTemplates was not called.
const DefaultWarmTemplates = 8

// warmStartRefills bounds how many templates RefillWarmPools fills (the
// most recently used ones): each pool member holds its memory.
const warmStartRefills = 4

// WarmTemplate describes one warm template (see CreateWarm): a saved
// "ready" state of one image and machine shape, in STATE_DIR/warm/<Key>/.
type WarmTemplate struct {
	// Key is 24 lowercase hex digits, a hash of the image digest and the
	// shape below.
	Key string
	// ImageName, ImageDir and ImageDigest (hex sha256 of the manifest)
	// identify the image the template was booted from.
	ImageName, ImageDir, ImageDigest string
	// DomainType is libvirt's domain type (kvm or qemu); VCPUs, MemoryMiB
	// (MiB) and DiskMiB (the root disk's virtual size, MiB; 0 unknown) the
	// machine shape; Network whether it has a NIC.
	DomainType string
	VCPUs      int
	MemoryMiB  int
	DiskMiB    int64
	Network    bool
	// SizeBytes is what the template takes on the host's disk (allocated
	// bytes of its qcow2 file).
	SizeBytes int64
	// CreatedAt is when it was built, BuildMs how long that took (ms);
	// LastUsed when a warm create last started from it (UTC).
	CreatedAt time.Time
	BuildMs   int64
	LastUsed  time.Time
	// Pooled is how many paused sandboxes its warm pool holds now (not
	// listed as sandboxes, not counted by admission control).
	Pooled int
}

// SetWarmTemplates sets how many warm templates the manager keeps (n < 1
// means DefaultWarmTemplates): when a new one is built beyond that, the
// least recently used others are removed with their pools.
func (m *Manager) SetWarmTemplates(n int) {
	if n < 1 {
		n = DefaultWarmTemplates
	}
	m.snap.mu.Lock()
	m.snap.maxTemplates = n
	m.snap.mu.Unlock()
}

// warmManifests returns the readable template manifests with the time
// each was last used (the manifest's mtime, see touchWarm), most
// recently used first.
func (m *Manager) warmManifests() ([]warmManifest, []time.Time) {
	paths, _ := filepath.Glob(filepath.Join(m.cfg.StateDir, "warm", "*", "manifest.json"))
	type entry struct {
		man  warmManifest
		used time.Time
	}
	var es []entry
	for _, p := range paths {
		var man warmManifest
		data, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(data, &man) != nil || man.Key != filepath.Base(filepath.Dir(p)) {
			continue
		}
		fi, err := os.Stat(p)
		if err != nil {
			continue
		}
		es = append(es, entry{man, fi.ModTime().UTC()})
	}
	slices.SortFunc(es, func(a, b entry) int { return b.used.Compare(a.used) })
	mans, used := make([]warmManifest, len(es)), make([]time.Time, len(es))
	for i, e := range es {
		mans[i], used[i] = e.man, e.used
	}
	return mans, used
}

// touchWarm records that key's template was just used.
func (m *Manager) touchWarm(key string) {
	now := time.Now()
	os.Chtimes(filepath.Join(m.warmDir(key), "manifest.json"), now, now)
}

// WarmTemplates lists the warm templates, most recently used first.
func (m *Manager) WarmTemplates() []WarmTemplate {
	mans, used := m.warmManifests()
	out := make([]WarmTemplate, 0, len(mans))
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	for i, man := range mans {
		t := WarmTemplate{
			Key: man.Key, ImageName: man.Source.ImageName, ImageDir: man.Source.ImageDir, ImageDigest: man.ImageDigest,
			DomainType: string(man.Spec.Type), VCPUs: man.VCPUs, MemoryMiB: man.MemoryMiB, Network: man.Spec.Interface != nil,
			SizeBytes: allocated(filepath.Join(m.warmDir(man.Key), "overlay.qcow2")),
			CreatedAt: man.CreatedAt, BuildMs: man.BuildMs, LastUsed: used[i], Pooled: len(m.snap.pool[man.Key]),
		}
		if t.DomainType == "" {
			t.DomainType = man.Source.DomainType
		}
		if res := man.Source.Resources; res != nil {
			t.DiskMiB = res.DiskMiB
		}
		out = append(out, t)
	}
	return out
}

// DeleteWarmTemplate removes the template with key and destroys its
// pool's members; it waits for a build or a copy of that template to
// end. The next warm create of its shape builds it again. Errors:
// ErrNoWarmTemplate.
func (m *Manager) DeleteWarmTemplate(ctx context.Context, key string) error {
	if !warmKeyRE.MatchString(key) {
		return fmt.Errorf("%w: %q is not a warm template key (24 hex digits): `agentbox warm ls` lists them", ErrNoWarmTemplate, key)
	}
	l := m.warmLock(key)
	l.Lock()
	defer l.Unlock()
	if _, err := os.Stat(filepath.Join(m.warmDir(key), "manifest.json")); err != nil {
		return fmt.Errorf("%w: no warm template %s: `agentbox warm ls` lists them", ErrNoWarmTemplate, key)
	}
	return m.removeWarm(context.WithoutCancel(ctx), key)
}

// removeWarm removes key's template directory and pool; call it with
// key's warm lock held.
func (m *Manager) removeWarm(ctx context.Context, key string) error {
	fl := m.snap.fileLock(filepath.Join(m.warmDir(key), "overlay.qcow2"))
	fl.Lock()
	err := os.RemoveAll(m.warmDir(key))
	fl.Unlock()
	// After the directory: fillPool checks it under m.snap.mu before it
	// adds a member.
	m.snap.mu.Lock()
	members := m.snap.pool[key]
	delete(m.snap.pool, key)
	m.snap.mu.Unlock()
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("remove warm template %s: %w", key, err))
	}
	for _, r := range members {
		errs = append(errs, r.undo.run(ctx))
	}
	return errors.Join(errs...)
}

// evictWarm removes the least recently used templates other than key
// while there are more than the cap (SetWarmTemplates); one in use (its
// lock held: building, or a warm create copying it) is skipped. It runs
// under key's lock, after a build.
func (m *Manager) evictWarm(key string) {
	m.snap.mu.Lock()
	limit := m.snap.maxTemplates
	m.snap.mu.Unlock()
	if limit < 1 {
		limit = DefaultWarmTemplates
	}
	mans, _ := m.warmManifests()
	n := len(mans)
	for i := len(mans) - 1; i >= 0 && n > limit; i-- {
		k := mans[i].Key
		if k == key {
			continue
		}
		l := m.warmLock(k)
		if !l.TryLock() {
			continue
		}
		if err := m.removeWarm(context.Background(), k); err != nil {
			m.log.Warn("evict warm template", "key", k, "err", err)
		} else {
			m.log.Info("least recently used warm template removed", "key", k, "image", mans[i].Source.ImageName, "max_templates", limit)
			n--
		}
		l.Unlock()
	}
}

// RefillWarmPools fills, in the background, the warm pools of the most
// recently used templates (at most 4) whose image still loads with the
// same digest, one template after the other, so a warm create right
// after a daemon start finds a paused sandbox waiting. load loads an
// image directory (the daemon verifies it as for a create). It does
// nothing without a pool (SetWarmPool) or a snapshot-capable driver;
// templates with a NIC are not pooled. Call it after Reconcile;
// DrainWarmPool stops it.
func (m *Manager) RefillWarmPools(load func(ctx context.Context, dir string) (*image.Image, error)) {
	if _, err := m.snapshotter(); err != nil {
		return
	}
	m.snap.mu.Lock()
	off := m.snap.poolSize == 0 || m.snap.poolShut
	if !off {
		m.snap.refills.Add(1) // DrainWarmPool waits for this walk
	}
	m.snap.mu.Unlock()
	if off {
		return
	}
	mans, _ := m.warmManifests()
	go func() {
		defer m.snap.refills.Done()
		n := 0
		for _, man := range mans {
			if n == warmStartRefills {
				return
			}
			if man.Spec.Interface != nil {
				continue
			}
			img, err := load(context.Background(), man.Source.ImageDir)
			if err != nil || img.Digest != man.ImageDigest {
				m.log.Info("warm pool not refilled: the template's image is gone or changed", "key", man.Key, "image_dir", man.Source.ImageDir)
				continue
			}
			n++
			src := m.warmSource(man, accel.Choice{DomainType: man.Source.DomainType, Accel: accel.Mode(man.Source.Accel), Reason: "warm template " + man.Key})
			if !m.startRefill(man.Key) {
				continue
			}
			m.fillPool(man.Key, src, img)
			m.endRefill(man.Key)
		}
	}()
}
