package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
)

// WarmLabel marks the short-lived sandbox that boots once to build a
// warm template; its value is the template's key.
const WarmLabel = "agentbox.warm-template"

// warmTag is the snapshot tag of a warm template's "ready" state.
const warmTag = "ready"

// warmKeyRE matches a template key (see warmKey).
var warmKeyRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

// warmManifest is STATE_DIR/warm/<key>/manifest.json: what a warm create
// needs besides the template's overlay.
type warmManifest struct {
	Key         string      `json:"key"`
	ImageDigest string      `json:"image_digest"`
	Spec        domain.Spec `json:"spec"`
	VCPUs       int         `json:"vcpus"`
	MemoryMiB   int         `json:"memory_mib"`
	CreatedAt   time.Time   `json:"created_at"`
	BuildMs     int64       `json:"build_ms"`
	// Source is the template sandbox's record: warm sandboxes start their
	// records from it (as restores do from SnapshotRecord.Source).
	Source Record `json:"source"`
}

// warmKey is the template key: a hash of everything the saved state
// depends on — image digest, domain type, machine, vCPUs, memory (MiB),
// the device set (the qemu-ga channel, a NIC) — and of the resource
// request (disk size, host-side limits), which the template's record
// carries to the sandboxes made from it.
func warmKey(digest, domainType, machine string, vcpus, memory int, qga, nic bool, res ResourceRequest) string {
	h := sha256.New()
	for _, s := range []string{digest, domainType, machine, strconv.Itoa(vcpus), strconv.Itoa(memory), strconv.FormatBool(qga), strconv.FormatBool(nic), fmt.Sprintf("%+v", res)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// warmDir returns STATE_DIR/warm/<key>.
func (m *Manager) warmDir(key string) string { return filepath.Join(m.cfg.StateDir, "warm", key) }

func (m *Manager) warmLock(key string) *sync.Mutex {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	if m.snap.warm == nil {
		m.snap.warm = map[string]*sync.Mutex{}
	}
	l, ok := m.snap.warm[key]
	if !ok {
		l = &sync.Mutex{}
		m.snap.warm[key] = l
	}
	return l
}

// CreateWarm is Create from the image's warm template: a pre-booted
// "ready" snapshot per image and machine shape (image digest, domain
// type, machine, vCPUs, memory, devices), kept in STATE_DIR/warm/<key>/
// (image directories may be read-only). The first warm create of a shape
// builds it — a cold boot (a sandbox labelled WarmLabel, visible while it
// boots), a save, a destroy — and later ones restore from it as Restore
// does (copy, paused start, load, resume, agent, clock, identity), which
// skips the boot. Concurrent first creates build the template once. A
// changed image has another digest, hence another key.
//
// Errors as for Create and Restore; a template that fails to restore is
// removed (the next warm create rebuilds it) and the error says so.
func (m *Manager) CreateWarm(ctx context.Context, opts Options) (*Sandbox, error) {
	if _, err := m.snapshotter(); err != nil {
		return nil, err
	}
	if opts.Image == nil || opts.Accel.DomainType == "" {
		return nil, fmt.Errorf("%w: a warm create needs an image and an accelerator", ErrInvalid)
	}
	vcpus := pick(opts.VCPUs, opts.Image.Manifest.Resources.VCPUs)
	memory := pick(opts.MemoryMiB, opts.Image.Manifest.Resources.MemoryMiB)
	if err := checkRequest(vcpus, opts.MemoryMiB, opts.Resources); err != nil { // resources.go; also for a template built before
		return nil, err
	}
	key := warmKey(opts.Image.Digest, opts.Accel.DomainType, domain.DefaultMachine, vcpus, memory, opts.GuestAgentChannel, opts.Network.HasNIC(), opts.Resources)
	man, err := m.warmTemplate(ctx, key, opts)
	if err != nil {
		return nil, err
	}
	m.touchWarm(key)
	src := m.warmSource(man, opts.Accel)
	src.base.Network = &NetworkRecord{Policy: opts.Network}
	ropts := RestoreOptions{
		Image: opts.Image, Name: opts.Name, Labels: opts.Labels, Extra: opts.Extra, Admit: opts.Admit,
		Timeout: opts.BootTimeout,
	}
	pooled := !opts.Network.HasNIC() // a pooled sandbox's network would be set up before its policy is known
	if pooled {
		defer m.refillPool(key, src, opts.Image)
		if r := m.takePooled(key); r != nil {
			return m.finishPooled(ctx, r, ropts)
		}
	}
	sb, err := m.restore(ctx, src, ropts)
	if errors.Is(err, ErrSnapshotUnusable) {
		l := m.warmLock(key)
		l.Lock()
		os.RemoveAll(m.warmDir(key))
		l.Unlock()
		return nil, fmt.Errorf("%w (the warm template was removed; the next --warm create rebuilds it)", err)
	}
	return sb, err
}

// warmSource is what a restore from template man starts from (the
// template's network policy; CreateWarm sets the request's).
func (m *Manager) warmSource(man warmManifest, ac accel.Choice) restoreSource {
	return restoreSource{
		name: "warm template " + man.Key, file: filepath.Join(m.warmDir(man.Key), "overlay.qcow2"), tag: warmTag,
		spec: man.Spec, accel: ac, vcpus: man.VCPUs, memory: man.MemoryMiB, base: man.Source,
	}
}

// warmTemplate returns the manifest of the template for key, building it
// first if there is none (under the key's lock).
func (m *Manager) warmTemplate(ctx context.Context, key string, opts Options) (warmManifest, error) {
	l := m.warmLock(key)
	l.Lock()
	defer l.Unlock()
	dir := m.warmDir(key)
	var man warmManifest
	if data, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err == nil {
		if json.Unmarshal(data, &man) == nil && man.Key == key && man.ImageDigest == opts.Image.Digest {
			if _, err := os.Stat(filepath.Join(dir, "overlay.qcow2")); err == nil {
				return man, nil
			}
		}
	}
	os.RemoveAll(dir)
	return m.buildWarm(ctx, key, opts)
}

// buildWarm boots a sandbox cold, waits for its agent, saves the "ready"
// snapshot, stops it and keeps its overlay as the template.
func (m *Manager) buildWarm(ctx context.Context, key string, opts Options) (_ warmManifest, err error) {
	snap, err := m.snapshotter()
	if err != nil {
		return warmManifest{}, err
	}
	ctx = context.WithoutCancel(ctx) // one build serves every waiting create
	start := time.Now()
	bo := opts
	bo.Name, bo.Labels, bo.Extra = "", map[string]string{WarmLabel: key}, nil
	sb, err := m.Create(ctx, bo)
	if err != nil {
		return warmManifest{}, fmt.Errorf("build warm template (cold boot): %w", err)
	}
	defer func() {
		if rerr := m.Remove(ctx, sb, true); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the template's sandbox: %w", rerr))
		}
	}()
	rec := sb.Record()
	if err := snap.SaveSnapshot(ctx, sb.Domain, warmTag); err != nil {
		if noSpace(err, sb.Overlay) {
			err = fmt.Errorf("%w: %v: free space under %s", ErrNoSpace, err, m.cfg.StateDir)
		}
		return warmManifest{}, fmt.Errorf("build warm template: save: %w", err)
	}
	if err := m.Stop(ctx, sb, "warm template saved"); err != nil {
		return warmManifest{}, fmt.Errorf("build warm template: stop: %w", err)
	}
	dir := m.warmDir(key)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return warmManifest{}, fmt.Errorf("warm template dir: %w", err)
	}
	man := warmManifest{
		Key: key, ImageDigest: opts.Image.Digest, Spec: *rec.Spec, VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB,
		CreatedAt: time.Now().UTC(), BuildMs: time.Since(start).Milliseconds(), Source: rec,
	}
	data, _ := json.MarshalIndent(man, "", "  ")
	err = os.Rename(sb.Overlay, filepath.Join(tmp, "overlay.qcow2"))
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "manifest.json"), append(data, '\n'), 0o600)
		if err == nil {
			err = os.Rename(tmp, dir)
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return warmManifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	m.log.Info("warm template built", "key", key, "image", opts.Image.Manifest.Name, "build_ms", man.BuildMs)
	m.pruneWarm(key, opts.Image.Dir, opts.Image.Digest)
	m.evictWarm(key)
	return man, nil
}

// pruneWarm removes the templates of earlier contents of image directory
// dir (another digest): the image changed, they can never be used again.
// It runs under key's lock and takes each other template's lock in turn
// (TryLock: one in use is left for a later build).
func (m *Manager) pruneWarm(key, dir, digest string) {
	mans, _ := filepath.Glob(filepath.Join(m.cfg.StateDir, "warm", "*", "manifest.json"))
	for _, p := range mans {
		var man warmManifest
		data, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(data, &man) != nil || man.Key == key || man.Source.ImageDir != dir || man.ImageDigest == digest {
			continue
		}
		l := m.warmLock(man.Key)
		if !l.TryLock() {
			continue
		}
		if err := m.removeWarm(context.Background(), man.Key); err == nil { // and its pool
			m.log.Info("warm template of a changed image removed", "key", man.Key, "image_dir", dir)
		}
		l.Unlock()
	}
}

// SetWarmPool sets how many sandboxes per warm template the manager keeps
// restored up to the loaded, paused domain, so that a warm create only
// resumes one and reconnects its agent (0, the default, keeps none). Pool
// members are not sandboxes yet: not listed, not counted by admission
// control (they hold their memory on the host, though), and destroyed by
// DrainWarmPool; a daemon that died leaves domains and directories that
// the next Reconcile removes. Only sandboxes without a NIC are pooled.
// Pools refill after each warm create of their template, and at start
// through RefillWarmPools; WarmTemplates shows their sizes.
func (m *Manager) SetWarmPool(n int) {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	m.snap.poolSize = max(n, 0)
}

// DrainWarmPool destroys the warm pool's members and stops refills; call
// it on shutdown.
func (m *Manager) DrainWarmPool(ctx context.Context) error {
	m.snap.mu.Lock()
	m.snap.poolShut = true
	var all []*restoring
	for k, rs := range m.snap.pool {
		all = append(all, rs...)
		delete(m.snap.pool, k)
	}
	m.snap.mu.Unlock()
	m.snap.refills.Wait() // a refill in flight drops its member itself
	var errs []error
	for _, r := range all {
		errs = append(errs, r.undo.run(ctx))
	}
	return errors.Join(errs...)
}

// takePooled returns a pool member of key whose domain still runs, or
// nil; dead members are discarded.
func (m *Manager) takePooled(key string) *restoring {
	for {
		m.snap.mu.Lock()
		rs := m.snap.pool[key]
		if len(rs) == 0 {
			m.snap.mu.Unlock()
			return nil
		}
		r := rs[0]
		m.snap.pool[key] = rs[1:]
		m.snap.mu.Unlock()
		if !r.sb.stoppedNow() {
			return r
		}
		m.log.Warn("warm pool member died while waiting; discarded", "sandbox", r.sb.ID)
		r.undo.run(context.Background())
	}
}

// finishPooled turns pool member r into the requested sandbox.
func (m *Manager) finishPooled(ctx context.Context, r *restoring, opts RestoreOptions) (_ *Sandbox, err error) {
	defer func() {
		if err != nil {
			if rerr := r.undo.run(ctx); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	r.start = time.Now()
	r.times.Copy, r.times.SourcePause, r.times.Start, r.times.Load = 0, 0, 0, 0
	if err := m.admitRestoring(r, opts); err != nil {
		return nil, err
	}
	return m.finishRestoring(ctx, r, opts)
}

// refillPool starts filling key's pool up to the pool size in the
// background (one refill per key at a time).
func (m *Manager) refillPool(key string, src restoreSource, img *image.Image) {
	if !m.startRefill(key) {
		return
	}
	go func() {
		defer m.endRefill(key)
		m.fillPool(key, src, img)
	}()
}

// startRefill claims key's refill (false: no pool, shutting down, or a
// refill of key already runs); endRefill releases it.
func (m *Manager) startRefill(key string) bool {
	m.snap.mu.Lock()
	defer m.snap.mu.Unlock()
	if m.snap.poolSize == 0 || m.snap.poolShut || m.snap.refilling[key] {
		return false
	}
	if m.snap.refilling == nil {
		m.snap.refilling, m.snap.pool = map[string]bool{}, map[string][]*restoring{}
	}
	m.snap.refilling[key] = true
	m.snap.refills.Add(1)
	return true
}

func (m *Manager) endRefill(key string) {
	m.snap.mu.Lock()
	delete(m.snap.refilling, key)
	m.snap.mu.Unlock()
	m.snap.refills.Done()
}

// fillPool restores members of key's pool one after the other until it
// is full, the pool shuts down or the template is removed (a member
// made meanwhile is destroyed).
func (m *Manager) fillPool(key string, src restoreSource, img *image.Image) {
	ctx := context.Background()
	manifest := filepath.Join(m.warmDir(key), "manifest.json")
	for {
		m.snap.mu.Lock()
		full := m.snap.poolShut || len(m.snap.pool[key]) >= m.snap.poolSize
		m.snap.mu.Unlock()
		if full {
			return
		}
		if _, err := os.Stat(manifest); err != nil {
			return // the template was removed
		}
		r, err := m.newRestoring(src, img)
		if err == nil {
			if err = m.prepareRestoring(ctx, r); err != nil {
				r.undo.run(ctx)
			}
		}
		if err != nil {
			m.log.Warn("warm pool refill failed", "key", key, "err", err)
			return
		}
		// Under the lock: removeWarm deletes the directory before it
		// empties the pool under the same lock.
		m.snap.mu.Lock()
		_, gone := os.Stat(manifest)
		drop := m.snap.poolShut || gone != nil
		if !drop {
			m.snap.pool[key] = append(m.snap.pool[key], r)
		}
		m.snap.mu.Unlock()
		if drop {
			r.undo.run(ctx)
			return
		}
		m.log.Info("warm pool refilled", "key", key, "sandbox", r.sb.ID)
	}
}
