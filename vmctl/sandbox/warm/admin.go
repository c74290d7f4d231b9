package warm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// DefaultTemplates is how many warm templates a service keeps when
// SetTemplates was not called.
const DefaultTemplates = 8

// startRefills bounds how many templates Refill fills (the
// most recently used ones): each pool member holds its memory.
const startRefills = 4

// Template describes one warm template (see Service.Create): a saved
// "ready" state of one image and machine shape, in STATE_DIR/warm/<Key>/.
type Template struct {
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
	// Tenant is the tenant whose own template it is ("" a shared one:
	// Service.SetSharing).
	Tenant string
}

// SetTemplates sets how many warm templates the service keeps (n < 1
// means DefaultTemplates): when a new one is built beyond that, the
// least recently used others are removed with their pools.
func (w *Service) SetTemplates(n int) {
	if n < 1 {
		n = DefaultTemplates
	}
	w.mu.Lock()
	w.maxTemplates = n
	w.mu.Unlock()
}

// manifests returns the readable template manifests with the time
// each was last used (the manifest's mtime, see touch), most
// recently used first.
func (w *Service) manifests() ([]manifest, []time.Time) {
	paths, _ := filepath.Glob(filepath.Join(w.cfg.StateDir, "warm", "*", "manifest.json"))
	type entry struct {
		man  manifest
		used time.Time
	}
	var es []entry
	for _, p := range paths {
		var man manifest
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
	mans, used := make([]manifest, len(es)), make([]time.Time, len(es))
	for i, e := range es {
		mans[i], used[i] = e.man, e.used
	}
	return mans, used
}

// touch records that key's template was just used.
func (w *Service) touch(key string) {
	now := time.Now()
	os.Chtimes(filepath.Join(w.dir(key), "manifest.json"), now, now)
}

// Templates lists the warm templates, most recently used first.
func (w *Service) Templates() []Template {
	mans, used := w.manifests()
	out := make([]Template, 0, len(mans))
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, man := range mans {
		t := Template{
			Key: man.Key, ImageName: man.Source.ImageName, ImageDir: man.Source.ImageDir, ImageDigest: man.ImageDigest,
			DomainType: string(man.Spec.Type), VCPUs: man.VCPUs, MemoryMiB: man.MemoryMiB, Network: man.Spec.Interface != nil,
			SizeBytes: snapshot.Allocated(filepath.Join(w.dir(man.Key), "overlay.qcow2")),
			CreatedAt: man.CreatedAt, BuildMs: man.BuildMs, LastUsed: used[i], Pooled: len(w.pool[man.Key]),
			Tenant: strings.TrimPrefix(man.Group, "tenant:"),
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

// Delete removes the template with key and destroys its
// pool's members; it waits for a build or a copy of that template to
// end. The next warm create of its shape builds it again. Errors:
// sandbox.ErrNoWarmTemplate.
func (w *Service) Delete(ctx context.Context, key string) error {
	if !keyRE.MatchString(key) {
		return fmt.Errorf("%w: %q is not a warm template key (24 hex digits): `agentbox warm ls` lists them", sandbox.ErrNoWarmTemplate, key)
	}
	l := w.lock(key)
	l.Lock()
	defer l.Unlock()
	if _, err := os.Stat(filepath.Join(w.dir(key), "manifest.json")); err != nil {
		return fmt.Errorf("%w: no warm template %s: `agentbox warm ls` lists them", sandbox.ErrNoWarmTemplate, key)
	}
	return w.remove(context.WithoutCancel(ctx), key)
}

// remove removes key's template directory and pool; call it with key's
// lock held.
func (w *Service) remove(ctx context.Context, key string) error {
	fl := w.snaps.FileLock(filepath.Join(w.dir(key), "overlay.qcow2"))
	fl.Lock()
	err := os.RemoveAll(w.dir(key))
	fl.Unlock()
	// After the directory: fill checks it under w.mu before it adds a
	// member.
	w.mu.Lock()
	members := w.pool[key]
	delete(w.pool, key)
	w.mu.Unlock()
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("remove warm template %s: %w", key, err))
	}
	for _, mb := range members {
		errs = append(errs, mb.b.Abort(ctx))
	}
	return errors.Join(errs...)
}

// evict removes the least recently used templates other than key
// while there are more than the cap (SetTemplates); one in use (its
// lock held: building, or a warm create copying it) is skipped. It runs
// under key's lock, after a build.
func (w *Service) evict(key string) {
	w.mu.Lock()
	limit := w.maxTemplates
	w.mu.Unlock()
	if limit < 1 {
		limit = DefaultTemplates
	}
	mans, _ := w.manifests()
	n := len(mans)
	for i := len(mans) - 1; i >= 0 && n > limit; i-- {
		k := mans[i].Key
		if k == key {
			continue
		}
		l := w.lock(k)
		if !l.TryLock() {
			continue
		}
		if err := w.remove(context.Background(), k); err != nil {
			w.log.Warn("evict warm template", "key", k, "err", err)
		} else {
			w.log.Info("least recently used warm template removed", "key", k, "image", mans[i].Source.ImageName, "max_templates", limit)
			n--
		}
		l.Unlock()
	}
}

// Refill fills, in the background, the warm pools of the most
// recently used templates (at most 4) whose image still loads with the
// same digest, one template after the other, so a warm create right
// after a daemon start finds a paused sandbox waiting. load loads an
// image directory (the daemon verifies it as for a create). It does
// nothing without a pool (SetPool) or a snapshot-capable driver;
// templates with a NIC are not pooled. Call it after Reconcile;
// Drain stops it.
func (w *Service) Refill(load func(ctx context.Context, dir string) (*image.Image, error)) {
	if _, err := w.snaps.Snapshotter(); err != nil {
		return
	}
	w.mu.Lock()
	off := w.poolSize == 0 || w.poolShut
	if !off {
		w.refills.Add(1) // Drain waits for this walk
	}
	w.mu.Unlock()
	if off {
		return
	}
	mans, _ := w.manifests()
	go func() {
		defer w.refills.Done()
		n := 0
		for _, man := range mans {
			if n == startRefills {
				return
			}
			if man.Spec.Interface != nil {
				continue
			}
			img, err := load(context.Background(), man.Source.ImageDir)
			if err != nil || img.Digest != man.ImageDigest {
				w.log.Info("warm pool not refilled: the template's image is gone or changed", "key", man.Key, "image_dir", man.Source.ImageDir)
				continue
			}
			n++
			src := w.source(man, accel.Choice{DomainType: man.Source.DomainType, Accel: accel.Mode(man.Source.Accel), Reason: "warm template " + man.Key})
			if !w.startRefill(man.Key) {
				continue
			}
			w.fill(man.Key, src, img)
			w.endRefill(man.Key)
		}
	}()
}
