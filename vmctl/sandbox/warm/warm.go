// Package warm makes sandboxes from warm templates: a pre-booted "ready"
// snapshot per image and machine shape, kept in STATE_DIR/warm/<key>/,
// and a pool of sandboxes restored from it up to the loaded, paused
// domain. It builds on the sandbox core (Create, Remove) and the snapshot
// package (restore steps, file locks).
package warm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/domain"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
)

// Label marks the short-lived sandbox that boots once to build a warm
// template; its value is the template's key.
const Label = "agentbox.warm-template"

// readyTag is the snapshot tag of a warm template's "ready" state.
const readyTag = "ready"

// keyRE matches a template key (see templateKey).
var keyRE = regexp.MustCompile(`^[0-9a-f]{24}$`)

// manifest is STATE_DIR/warm/<key>/manifest.json: what a warm create
// needs besides the template's overlay.
type manifest struct {
	Key         string      `json:"key"`
	ImageDigest string      `json:"image_digest"`
	Spec        domain.Spec `json:"spec"`
	VCPUs       int         `json:"vcpus"`
	MemoryMiB   int         `json:"memory_mib"`
	CreatedAt   time.Time   `json:"created_at"`
	BuildMs     int64       `json:"build_ms"`
	// Source is the template sandbox's record: warm sandboxes start their
	// records from it (as restores do from SnapshotRecord.Source).
	Source sandbox.Record `json:"source"`
	// Memory is set for a memory template (ModeMemory): its RAM and
	// device state files and its clone key.
	Memory *memManifest `json:"memory,omitempty"`
	// Group is the template's sharing group (groupOf): "" shared,
	// "tenant:NAME" one tenant's own.
	Group string `json:"group,omitempty"`
}

// templateKey is the template key: a hash of everything the saved state
// depends on — image digest, domain type, machine, vCPUs, memory (MiB),
// the device set (the qemu-ga channel, a NIC) — and of the resource
// request (disk size, host-side limits), which the template's record
// carries to the sandboxes made from it — and of its sharing group (""
// for the shared templates, which keeps their keys as they were before
// groups; "tenant:NAME" for a tenant's own: groupOf).
func templateKey(digest, domainType, machine string, vcpus, memory int, qga, nic bool, res sandbox.ResourceRequest, group string) string {
	h := sha256.New()
	parts := []string{digest, domainType, machine, strconv.Itoa(vcpus), strconv.Itoa(memory), strconv.FormatBool(qga), strconv.FormatBool(nic), fmt.Sprintf("%+v", res)}
	if group != "" {
		parts = append(parts, group)
	}
	for _, s := range parts {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// groupOf returns the sharing group of a warm create for tenant ("" the
// admin's): "" (the shared templates) when the Service's sharing
// predicate (SetSharing) says the tenant shares, else "tenant:NAME".
func (w *Service) groupOf(tenant string) string {
	w.mu.Lock()
	shares := w.shares
	w.mu.Unlock()
	if tenant == "" || shares == nil || shares(tenant) {
		return ""
	}
	return "tenant:" + tenant
}

// SetSharing sets which tenants' warm sandboxes clone the shared
// templates (shares(name) true); every other tenant gets templates of
// its own, built from the same image as the shared ones (a pristine boot,
// never a tenant's state) but never cloned by another party: clones of
// one memory template share host pages, and cross-VM side channels
// through them cannot be ruled out. The admin's ("" tenant) always uses
// the shared ones. nil (the default) shares with every tenant.
func (w *Service) SetSharing(shares func(tenant string) bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.shares = shares
}

// Service makes warm sandboxes of one Manager and keeps its templates and
// pool. It is safe for concurrent use.
type Service struct {
	m     *sandbox.Manager
	snaps *snapshot.Service
	cfg   sandbox.Config
	log   *slog.Logger

	mu sync.Mutex

	// The pool: per template key, sandboxes restored up to the loaded,
	// paused domain.
	poolSize int
	poolShut bool
	// mode is how templates are made (SetMode).
	mode Mode
	// maxTemplates caps the templates (SetTemplates).
	maxTemplates int
	pool         map[string][]member
	// shares says which tenants clone the shared templates (SetSharing).
	shares    func(tenant string) bool
	refilling map[string]bool
	refills   sync.WaitGroup
}

// member is one pooled sandbox: a restore prepared from src.
type member struct {
	b   *sandbox.Build
	src snapshot.Source
}

// New returns the warm service of m, restoring through snaps.
func New(m *sandbox.Manager, snaps *snapshot.Service) *Service {
	cfg := m.Config()
	return &Service{m: m, snaps: snaps, cfg: cfg, log: cfg.Logger}
}

// dir returns STATE_DIR/warm/<key>.
func (w *Service) dir(key string) string { return filepath.Join(w.cfg.StateDir, "warm", key) }

// lock returns the lock of one template key, held while the template is
// built, removed or evicted: the snapshot service's lock of the template's
// directory (one keyed-lock table for every file the sandbox packages
// share).
func (w *Service) lock(key string) *sync.Mutex { return w.snaps.FileLock(w.dir(key)) }

// Create is sandbox.Manager.Create from the image's warm template: a
// pre-booted "ready" snapshot per image and machine shape (image digest,
// domain type, machine, vCPUs, memory, devices), kept in
// STATE_DIR/warm/<key>/ (image directories may be read-only). The first
// warm create of a shape builds it — a cold boot (a sandbox labelled
// Label, visible while it boots), a save, a destroy — and later ones
// restore from it as a snapshot restore does (copy, paused start, load,
// resume, agent, clock, identity), which skips the boot. Concurrent
// first creates build the template once. A changed image has another
// digest, hence another key. A tenant that does not share (SetSharing)
// has keys, templates and pools of its own.
//
// Errors as for Create and Restore; a template that fails to restore is
// removed (the next warm create rebuilds it) and the error says so.
func (w *Service) Create(ctx context.Context, opts sandbox.Options) (*sandbox.Sandbox, error) {
	if _, err := w.snaps.Snapshotter(); err != nil {
		return nil, err
	}
	if opts.Image == nil || opts.Accel.DomainType == "" {
		return nil, fmt.Errorf("%w: a warm create needs an image and an accelerator", sandbox.ErrInvalid)
	}
	// The key holds the request's resources as given; only the vCPUs and
	// memory are resolved against the image's.
	vcpus, memory, _ := resources.Resolve(opts.Image, opts.VCPUs, opts.MemoryMiB, opts.Resources)
	if err := resources.CheckRequest(vcpus, opts.MemoryMiB, opts.Resources); err != nil { // also for a template built before
		return nil, err
	}
	mt, memMode := w.memTemplater()
	domainType := opts.Accel.DomainType
	if memMode {
		domainType += "+" + string(ModeMemory) // another template than a snapshot template
	}
	key := templateKey(opts.Image.Digest, domainType, domain.DefaultMachine, vcpus, memory, opts.GuestAgentChannel, opts.Network.HasNIC(), opts.Resources, w.groupOf(opts.Tenant))
	var man manifest
	var err error
	if memMode {
		man, err = w.memTemplate(ctx, mt, key, opts)
	} else {
		man, err = w.template(ctx, key, opts)
	}
	if err != nil {
		return nil, err
	}
	w.touch(key)
	src := w.source(man, opts.Accel)
	src.Base.Network = &sandbox.NetworkRecord{Policy: opts.Network}
	ropts := snapshot.RestoreOptions{
		Image: opts.Image, Name: opts.Name, Labels: opts.Labels, Extra: opts.Extra, Admit: opts.Admit,
		Timeout: opts.BootTimeout, Template: opts.Template, Tenant: opts.Tenant,
	}
	pooled := !opts.Network.HasNIC() // a pooled sandbox's network would be set up before its policy is known
	if pooled {
		defer w.refill(key, src, opts.Image)
		if mb, ok := w.take(key); ok {
			return w.snaps.Finish(ctx, mb.b, mb.src, ropts)
		}
	}
	sb, err := w.snaps.RestoreFrom(ctx, src, ropts)
	if errors.Is(err, sandbox.ErrSnapshotUnusable) {
		// remove takes the template file's lock and w.mu, never key's.
		l := w.lock(key)
		l.Lock()
		if rerr := w.remove(context.WithoutCancel(ctx), key); rerr != nil { // and its pool
			w.log.Warn("remove unusable warm template", "key", key, "err", rerr)
		}
		l.Unlock()
		return nil, fmt.Errorf("%w (the warm template was removed; the next --warm create rebuilds it)", err)
	}
	return sb, err
}

// source is what a restore from template man starts from (the template's
// network policy; Create sets the request's): a clone (memSource) for a
// memory template.
func (w *Service) source(man manifest, ac accel.Choice) snapshot.Source {
	src := snapshot.Source{
		Name: "warm template " + man.Key, File: filepath.Join(w.dir(man.Key), "overlay.qcow2"), Tag: readyTag,
		Spec: man.Spec, Accel: ac, VCPUs: man.VCPUs, MemoryMiB: man.MemoryMiB, Base: man.Source,
	}
	if mt, ok := w.cfg.Driver.(sandbox.MemoryTemplater); ok && man.Memory != nil {
		src = w.memSource(mt, man, src)
	}
	return src
}

// template returns the manifest of the template for key, building it
// first if there is none (under the key's lock).
func (w *Service) template(ctx context.Context, key string, opts sandbox.Options) (manifest, error) {
	l := w.lock(key)
	l.Lock()
	defer l.Unlock()
	dir := w.dir(key)
	var man manifest
	if data, err := os.ReadFile(filepath.Join(dir, "manifest.json")); err == nil {
		if json.Unmarshal(data, &man) == nil && man.Key == key && man.ImageDigest == opts.Image.Digest {
			if _, err := os.Stat(filepath.Join(dir, "overlay.qcow2")); err == nil {
				return man, nil
			}
		}
	}
	os.RemoveAll(dir)
	return w.build(ctx, key, opts)
}

// build boots a sandbox cold, waits for its agent, saves the "ready"
// snapshot, stops it and keeps its overlay as the template.
func (w *Service) build(ctx context.Context, key string, opts sandbox.Options) (_ manifest, err error) {
	snap, err := w.snaps.Snapshotter()
	if err != nil {
		return manifest{}, err
	}
	ctx = context.WithoutCancel(ctx) // one build serves every waiting create
	start := time.Now()
	bo := opts
	bo.Name, bo.Labels, bo.Extra, bo.Tenant = "", map[string]string{Label: key}, nil, "" // the template is no tenant's
	sb, err := w.m.Create(ctx, bo)
	if err != nil {
		return manifest{}, fmt.Errorf("build warm template (cold boot): %w", err)
	}
	defer func() {
		if rerr := w.m.Remove(ctx, sb, true); rerr != nil {
			err = errors.Join(err, fmt.Errorf("remove the template's sandbox: %w", rerr))
		}
	}()
	rec := sb.Record()
	if err := snap.SaveSnapshot(ctx, sb.Domain, readyTag); err != nil {
		if snapshot.NoSpace(err, sb.Overlay) {
			err = fmt.Errorf("%w: %v: free space under %s", sandbox.ErrNoSpace, err, w.cfg.StateDir)
		}
		return manifest{}, fmt.Errorf("build warm template: save: %w", err)
	}
	if err := w.m.Stop(ctx, sb, "warm template saved"); err != nil {
		return manifest{}, fmt.Errorf("build warm template: stop: %w", err)
	}
	dir := w.dir(key)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return manifest{}, fmt.Errorf("warm template dir: %w", err)
	}
	man := manifest{
		Key: key, ImageDigest: opts.Image.Digest, Spec: *rec.Spec, VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB,
		CreatedAt: time.Now().UTC(), BuildMs: time.Since(start).Milliseconds(), Source: rec, Group: w.groupOf(opts.Tenant),
	}
	data, _ := json.MarshalIndent(man, "", "  ")
	err = os.Rename(sb.Overlay, filepath.Join(tmp, "overlay.qcow2"))
	if err == nil {
		err = w.m.Reclaim(filepath.Join(tmp, "overlay.qcow2")) // not the build's QEMU user's any more
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(tmp, "manifest.json"), append(data, '\n'), 0o600)
		if err == nil {
			err = os.Rename(tmp, dir)
		}
	}
	if err != nil {
		os.RemoveAll(tmp)
		return manifest{}, fmt.Errorf("keep warm template: %w", err)
	}
	w.log.Info("warm template built", "key", key, "image", opts.Image.Manifest.Name, "build_ms", man.BuildMs)
	w.prune(key, opts.Image.Dir, opts.Image.Digest)
	w.evict(key)
	return man, nil
}

// prune removes the templates of earlier contents of image directory dir
// (another digest): the image changed, they can never be used again. It
// runs under key's lock and takes each other template's lock in turn
// (TryLock: one in use is left for a later build).
func (w *Service) prune(key, dir, digest string) {
	mans, _ := filepath.Glob(filepath.Join(w.cfg.StateDir, "warm", "*", "manifest.json"))
	for _, p := range mans {
		var man manifest
		data, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(data, &man) != nil || man.Key == key || man.Source.ImageDir != dir || man.ImageDigest == digest {
			continue
		}
		l := w.lock(man.Key)
		if !l.TryLock() {
			continue
		}
		if err := w.remove(context.Background(), man.Key); err == nil { // and its pool
			w.log.Info("warm template of a changed image removed", "key", man.Key, "image_dir", dir)
		}
		l.Unlock()
	}
}

// SetPool sets how many sandboxes per warm template the service keeps
// restored up to the loaded, paused domain, so that a warm create only
// resumes one and reconnects its agent (0, the default, keeps none). Pool
// members are not sandboxes yet: not listed, not counted by admission
// control (they hold their memory on the host, though), and destroyed by
// Drain; a daemon that died leaves domains and directories that the next
// Reconcile removes. Only sandboxes without a NIC are pooled. Pools refill
// after each warm create of their template, and at start through Refill;
// Templates shows their sizes.
func (w *Service) SetPool(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.poolSize = max(n, 0)
}

// Drain destroys the pool's members and stops refills; call it on
// shutdown.
func (w *Service) Drain(ctx context.Context) error {
	w.mu.Lock()
	w.poolShut = true
	var all []member
	for k, ms := range w.pool {
		all = append(all, ms...)
		delete(w.pool, k)
	}
	w.mu.Unlock()
	w.refills.Wait() // a refill in flight drops its member itself
	var errs []error
	for _, mb := range all {
		errs = append(errs, mb.b.Abort(ctx))
	}
	return errors.Join(errs...)
}

// take returns a pool member of key whose domain still runs; dead
// members are discarded.
func (w *Service) take(key string) (member, bool) {
	for {
		w.mu.Lock()
		ms := w.pool[key]
		if len(ms) == 0 {
			w.mu.Unlock()
			return member{}, false
		}
		mb := ms[0]
		w.pool[key] = ms[1:]
		w.mu.Unlock()
		select {
		case <-mb.b.Sandbox.Stopped():
		default:
			return mb, true
		}
		w.log.Warn("warm pool member died while waiting; discarded", "sandbox", mb.b.Sandbox.ID)
		mb.b.Abort(context.Background())
	}
}

// refill starts filling key's pool up to the pool size in the background
// (one refill per key at a time).
func (w *Service) refill(key string, src snapshot.Source, img *image.Image) {
	if !w.startRefill(key) {
		return
	}
	go func() {
		defer w.endRefill(key)
		w.fill(key, src, img)
	}()
}

// startRefill claims key's refill (false: no pool, shutting down, or a
// refill of key already runs); endRefill releases it.
func (w *Service) startRefill(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.poolSize == 0 || w.poolShut || w.refilling[key] {
		return false
	}
	if w.refilling == nil {
		w.refilling, w.pool = map[string]bool{}, map[string][]member{}
	}
	w.refilling[key] = true
	w.refills.Add(1)
	return true
}

func (w *Service) endRefill(key string) {
	w.mu.Lock()
	delete(w.refilling, key)
	w.mu.Unlock()
	w.refills.Done()
}

// fill restores members of key's pool one after the other until it is
// full, the pool shuts down or the template is removed (a member made
// meanwhile is destroyed).
func (w *Service) fill(key string, src snapshot.Source, img *image.Image) {
	ctx := context.Background()
	manPath := filepath.Join(w.dir(key), "manifest.json")
	for {
		w.mu.Lock()
		full := w.poolShut || len(w.pool[key]) >= w.poolSize
		w.mu.Unlock()
		if full {
			return
		}
		if _, err := os.Stat(manPath); err != nil {
			return // the template was removed
		}
		b, err := w.snaps.Prepare(ctx, src, img)
		if err != nil {
			w.log.Warn("warm pool refill failed", "key", key, "err", err)
			return
		}
		// Under the lock: remove deletes the directory before it empties
		// the pool under the same lock.
		w.mu.Lock()
		_, gone := os.Stat(manPath)
		drop := w.poolShut || gone != nil
		if !drop {
			w.pool[key] = append(w.pool[key], member{b, src})
		}
		w.mu.Unlock()
		if drop {
			b.Abort(ctx)
			return
		}
		w.log.Info("warm pool refilled", "key", key, "sandbox", b.Sandbox.ID)
	}
}
