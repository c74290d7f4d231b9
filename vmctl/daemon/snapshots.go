package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// snapshotService is the daemon's snapshots (save, list, remove,
// restore: snapshots.go), forks (RestoreSnapshots: fork.go) and warm
// templates.
type snapshotService struct{ *core }

var _ backend.SnapshotBackend = (*Daemon)(nil)

// snapshotMetrics are the histograms of snapshot saves and restores
// (registered on first use, so the daemon's metrics.go stays as it is).
type snapshotMetrics struct {
	save, restore, warm prometheus.Histogram
}

func (c *core) snapMetrics() *snapshotMetrics {
	c.snapMetricsOnce.Do(func() {
		m := &snapshotMetrics{
			save: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "agentbox_snapshot_save_seconds", Help: "Duration of live snapshot saves (the sandbox keeps running).", Buckets: latencyBuckets,
			}),
			restore: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "agentbox_snapshot_restore_seconds", Help: "Time from a restore request to the restored sandbox's agent answering.", Buckets: latencyBuckets,
			}),
			warm: prometheus.NewHistogram(prometheus.HistogramOpts{
				Name: "agentbox_sandbox_warm_start_seconds", Help: "Time from a warm create to the sandbox's agent answering (a template build included).", Buckets: latencyBuckets,
			}),
		}
		for _, col := range []prometheus.Collector{m.save, m.restore, m.warm} {
			if err := c.metrics.reg.Register(col); err != nil {
				c.log.Warn("register snapshot metric", "err", err)
			}
		}
		c.snapM = m
	})
	return c.snapM
}

// startSandbox is the manager call of a create: a boot, or with warm a
// restore from the image's warm template.
func (s *lifecycleService) startSandbox(ctx context.Context, warm bool, opts sandbox.Options) (*sandbox.Sandbox, error) {
	if !warm {
		return s.mgr.Create(ctx, opts)
	}
	start := time.Now()
	sb, err := s.warm.Create(ctx, opts)
	if err == nil {
		s.snapMetrics().warm.Observe(time.Since(start).Seconds())
	}
	return sb, err
}

// SaveSnapshot implements backend.SnapshotBackend.
func (s *snapshotService) SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
	start := time.Now()
	if err := s.adm.admitting(); err != nil {
		return api.Snapshot{}, err
	}
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Snapshot{}, err
	}
	var raw []byte
	if b := s.box(sb.ID); b != nil {
		raw = b.sb.ExecAccount().Encode()
	}
	rec, err := s.saveWithin(ctx, s.tenants.named(sb.Tenant()), sb, req.Name, raw)
	args := map[string]any{"name": req.Name}
	if err == nil {
		args["snapshot"], args["save_ms"], args["vmstate_bytes"], args["disk_bytes"] = rec.ID, rec.SaveMs, rec.VMStateBytes, rec.DiskBytes
	}
	s.auditAction(ctx, sb.ID, audit.ActionSnapshotSave, args, start, err)
	if err != nil {
		return api.Snapshot{}, err
	}
	s.snapMetrics().save.Observe(float64(rec.SaveMs) / 1000)
	s.events.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSnapshotSaved, Sandbox: sb.ID, Name: sb.Name, Reason: "snapshot " + rec.Name})
	return s.snapshotView(rec), nil
}

// saveWithin saves sb's snapshot within its tenant t's snapshot quota
// (max_snapshots, max_snapshot_mib; nil t, the admin's, has none). The
// count, and bytes already at or over the limit, are refused before the
// save; a save whose size (known only once it is made) goes over is
// removed again and refused. Both refusals wrap tenant.ErrQuotaExceeded
// (429 tenant_quota) with the numbers. A tenant's saves run one at a
// time, so concurrent ones cannot pass the check together.
func (s *snapshotService) saveWithin(ctx context.Context, t *tenant.Tenant, sb *sandbox.Sandbox, name string, raw []byte) (sandbox.SnapshotRecord, error) {
	if t == nil || t.Quota.MaxSnapshots == 0 && t.Quota.MaxSnapshotMiB == 0 {
		return s.snaps.Save(ctx, sb, name, raw)
	}
	mu := s.tenants.snapshotLock(t.Name)
	mu.Lock()
	defer mu.Unlock()
	count, used, err := s.snapshotUsage(t.Name)
	if err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	if err := checkSnapshotQuota(t, count, used, 0); err != nil {
		return sandbox.SnapshotRecord{}, err
	}
	rec, err := s.snaps.Save(ctx, sb, name, raw)
	if err != nil {
		return rec, err
	}
	if qerr := checkSnapshotQuota(t, count, used, snapshotBytes(rec)); qerr != nil {
		if derr := s.snaps.Delete(context.WithoutCancel(ctx), rec.ID); derr != nil {
			return sandbox.SnapshotRecord{}, errors.Join(qerr, fmt.Errorf("remove the snapshot over the quota: %w", derr))
		}
		return sandbox.SnapshotRecord{}, qerr
	}
	return rec, nil
}

// snapshotUsage returns how many snapshots tenant name has and the bytes
// they take (snapshotBytes).
func (s *snapshotService) snapshotUsage(name string) (count int, bytes int64, err error) {
	recs, err := s.snaps.List("")
	if err != nil {
		return 0, 0, err
	}
	for _, r := range recs {
		if r.Tenant == name {
			count++
			bytes += snapshotBytes(r)
		}
	}
	return count, bytes, nil
}

// snapshotBytes is what a snapshot takes on the host's disk: its
// DiskBytes, else (a record without it) its VMStateBytes.
func snapshotBytes(r sandbox.SnapshotRecord) int64 {
	if r.DiskBytes > 0 {
		return r.DiskBytes
	}
	return r.VMStateBytes
}

// checkSnapshotQuota checks tenant t's snapshot quota: before a save
// (made 0: count+1 snapshots, and used bytes under the limit), or after
// one of made bytes (used+made within the limit). The refusal wraps
// tenant.ErrQuotaExceeded and names the numbers and the key to raise.
func checkSnapshotQuota(t *tenant.Tenant, count int, used, made int64) error {
	q := t.Quota
	if made == 0 && q.MaxSnapshots > 0 && count >= q.MaxSnapshots {
		return errdefs.WithDetails(tenant.ErrQuotaExceeded.WithMessage(fmt.Sprintf(
			"tenant %s: %d of %d snapshots kept; remove one (agentbox snapshot rm NAME) or raise max_snapshots", t.Name, count, q.MaxSnapshots)),
			map[string]any{"tenant": t.Name, "resource": "snapshots", "used": count, "limit": q.MaxSnapshots, "asked": 1})
	}
	limit := q.MaxSnapshotMiB << 20
	if limit == 0 || (made == 0 && used < limit) || (made > 0 && used+made <= limit) {
		return nil
	}
	msg := fmt.Sprintf("tenant %s: its snapshots take %d of %d MiB (%d of %d bytes); remove some (agentbox snapshot rm NAME) or raise max_snapshot_mib",
		t.Name, mib(used), q.MaxSnapshotMiB, used, limit)
	if made > 0 {
		msg = fmt.Sprintf("tenant %s: the snapshot takes %d MiB (%d bytes) and its others %d of %d MiB (%d of %d bytes): it was removed again; remove some (agentbox snapshot rm NAME) or raise max_snapshot_mib",
			t.Name, mib(made), made, mib(used), q.MaxSnapshotMiB, used, limit)
	}
	return errdefs.WithDetails(tenant.ErrQuotaExceeded.WithMessage(msg),
		map[string]any{"tenant": t.Name, "resource": "snapshot_bytes", "used": used, "limit": limit, "asked": made})
}

// mib is n bytes in MiB, rounded up.
func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// ListSnapshots implements backend.SnapshotBackend.
func (s *snapshotService) ListSnapshots(ctx context.Context, ref string) ([]api.Snapshot, error) {
	id := ""
	if ref != "" {
		if sb, err := s.get(ctx, ref); err == nil {
			id = sb.ID
		} else if isID(ref) {
			id = ref // a removed sandbox's snapshots, by its ID
		} else {
			return nil, sandbox.ErrNotFound.WithMessage(fmt.Sprintf("no sandbox named %q: the snapshots of a removed sandbox are listed by its ID (see `agentbox snapshot ls`)", ref))
		}
	}
	recs, err := s.snaps.List(id)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		if !tenant.Sees(ctx, r.Tenant) {
			continue // another tenant's
		}
		out = append(out, s.snapshotView(r))
	}
	return out, nil
}

// GetSnapshot implements backend.SnapshotBackend.
func (s *snapshotService) GetSnapshot(ctx context.Context, name string) (api.Snapshot, error) {
	rec, err := s.snapshot(ctx, name)
	if err != nil {
		return api.Snapshot{}, err
	}
	return s.snapshotView(rec), nil
}

// DeleteSnapshot implements backend.SnapshotBackend.
func (s *snapshotService) DeleteSnapshot(ctx context.Context, name string) error {
	start := time.Now()
	rec, err := s.snapshot(ctx, name)
	if err != nil {
		return err
	}
	err = s.snaps.Delete(ctx, rec.ID)
	s.auditAction(ctx, rec.SandboxID, audit.ActionSnapshotDelete, map[string]any{"name": rec.Name, "snapshot": rec.ID}, start, err)
	if err != nil {
		return err
	}
	s.events.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSnapshotRemoved, Sandbox: rec.SandboxID, Name: rec.SandboxName, Reason: "snapshot " + rec.Name, Tenant: rec.Tenant})
	return nil
}

// RestoreSnapshot implements backend.SnapshotBackend: it loads the
// snapshot's image (refused when its digest changed), admits the
// resources like a create, and starts the new sandbox with the snapshot's
// lifetime limits overridden by the request's (its resources and network
// policy are the snapshot's).
func (s *snapshotService) RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
	start := time.Now()
	args := map[string]any{"snapshot": name}
	if req.Name != "" {
		args["name"] = req.Name
	}
	ctx = s.withPolicyTrail(ctx) // policy.go
	sb, err := s.restore(ctx, name, req)
	s.auditMade(ctx, audit.ActionRestore, start, args, sb, err, func(sb *sandbox.Sandbox) {
		t := sb.LastRestore()
		args["copy_ms"], args["source_pause_ms"], args["load_ms"] = t.Copy.Milliseconds(), t.SourcePause.Milliseconds(), t.Load.Milliseconds()
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	s.snapMetrics().restore.Observe(time.Since(start).Seconds())
	return s.view(sb), nil
}

func (s *snapshotService) restore(ctx context.Context, name string, req api.RestoreRequest) (_ *sandbox.Sandbox, err error) {
	if err := s.adm.admitting(); err != nil {
		return nil, err
	}
	rec, err := s.snapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	// The new sandbox is the snapshot's tenant's (also when the admin
	// restores it) and counts against its quota, and its network policy
	// (the source's) has only the host ports the tenant is granted now.
	owner := s.tenants.named(rec.Tenant)
	if err := owner.CheckHostPorts(snapshotHostPorts(rec)); err != nil {
		return nil, err
	}
	release, err := s.tenants.reserve(ctx, owner, rec.VCPUs, rec.MemoryMiB) // tenants.go
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release() // a failed restore holds nothing
		}
	}()
	img, err := image.Load(ctx, rec.ImageDir, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
	if err != nil {
		return nil, sandbox.ErrSnapshotUnusable.WithMessage(fmt.Sprintf("snapshot %q needs its image %s (sha256:%s), which no longer loads: %v: put the image back or remove the snapshot", rec.Name, rec.ImageDir, rec.ImageDigest, err))
	}
	ex, err := sandbox.DecodeExecAccount(rec.Extra)
	if err != nil {
		s.log.Warn("snapshot extra unreadable", "snapshot", rec.Name, "err", err)
	}
	if err := s.policyRestore(ctx, &req, rec, img, api.Limits(ex.Limits), &ex.Env); err != nil { // policy.go
		return nil, err
	}
	raw := sandbox.ExecAccount{Limits: sandbox.ExecLimits(mergeLimits(req.Limits, api.Limits(ex.Limits))), Creator: api.CallerFrom(ctx).ID, Env: ex.Env}.Encode()
	sb, err := s.snaps.Restore(ctx, rec.ID, snapshot.RestoreOptions{
		Image: img, Name: req.Name, Labels: req.Labels, Extra: raw, Admit: s.adm.admit, Tenant: rec.Tenant,
	})
	if err != nil {
		return nil, err
	}
	s.tenants.keep(sb.ID, sb.Tenant(), release)
	if _, gone := s.mgr.Get(sb.ID); gone != nil {
		s.tenants.removed(sb.ID) // removed before its hold was kept
	}
	s.addBox(sb)
	s.processes.dropInheritedProcesses(ctx, sb) // procs.go
	sb.Touch()
	return sb, nil
}

// snapshotHostPorts returns the host:PORT ports of the network policy a
// restore of rec gets (its source's), none when the source record does
// not decode (the restore then fails on it).
func snapshotHostPorts(rec sandbox.SnapshotRecord) []uint16 {
	var src sandbox.Record
	if len(rec.Source) == 0 || json.Unmarshal(rec.Source, &src) != nil || src.Network == nil {
		return nil
	}
	return src.Network.Policy.HostPorts()
}

// snapshotView renders a snapshot record for the API; SourceRemoved says
// whether the manager still knows the snapshotted sandbox.
func (s *snapshotService) snapshotView(r sandbox.SnapshotRecord) api.Snapshot {
	_, err := s.mgr.Get(r.SandboxID)
	return snapshotView(r, err != nil)
}

func snapshotView(r sandbox.SnapshotRecord, sourceRemoved bool) api.Snapshot {
	v := api.Snapshot{
		ID: r.ID, Name: r.Name, Sandbox: r.SandboxID, SandboxName: r.SandboxName, SourceRemoved: sourceRemoved,
		Image: api.ImageRef{Name: r.ImageName, Digest: digest(r.ImageDigest), Dir: r.ImageDir},
		Accel: r.Accel, Machine: r.Machine, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB,
		CreatedAt: r.CreatedAt, SaveMs: r.SaveMs, VMStateBytes: r.VMStateBytes, DiskBytes: r.DiskBytes,
	}
	if ex, err := sandbox.DecodeExecAccount(r.Extra); err == nil {
		v.Limits = api.Limits(ex.Limits)
	}
	return v
}

var _ backend.WarmBackend = (*Daemon)(nil)

// ListWarm implements backend.WarmBackend.
func (s *snapshotService) ListWarm(ctx context.Context) ([]api.WarmTemplate, error) {
	ts := s.warm.Templates()
	out := make([]api.WarmTemplate, 0, len(ts))
	for _, t := range ts {
		if t.Tenant != "" && !tenant.Sees(ctx, t.Tenant) {
			continue // another tenant's own (share_templates unset)
		}
		out = append(out, api.WarmTemplate{
			Key: t.Key, Image: api.ImageRef{Name: t.ImageName, Digest: digest(t.ImageDigest), Dir: t.ImageDir},
			DomainType: t.DomainType, VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB, DiskMiB: t.DiskMiB, Network: t.Network,
			SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, BuildMs: t.BuildMs, LastUsedAt: t.LastUsed, Pooled: t.Pooled,
		})
	}
	return out, nil
}

// DeleteWarm implements backend.WarmBackend.
func (s *snapshotService) DeleteWarm(ctx context.Context, key string) error {
	if err := adminOnly(ctx, "removing a warm template"); err != nil { // tenants.go
		return err
	}
	if err := s.warm.Delete(ctx, key); err != nil {
		return err
	}
	s.log.Info("warm template removed", "key", key, "caller", api.CallerFrom(ctx).ID)
	return nil
}

// startWarm applies the warm settings and refills the pools of existing
// templates in the background (after Reconcile removed a previous
// daemon's pool leftovers).
func (s *snapshotService) startWarm() {
	s.warm.SetTemplates(s.cfg.WarmTemplates)
	verify := s.cfg.ImageVerifyCacheDir
	s.warm.Refill(func(ctx context.Context, dir string) (*image.Image, error) {
		return image.Load(ctx, dir, image.LoadOptions{VerifyCacheDir: verify})
	})
}
