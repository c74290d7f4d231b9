package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/snapshot"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

var _ apiserver.SnapshotBackend = (*Daemon)(nil)

// snapshotMetrics are the histograms of snapshot saves and restores
// (registered on first use, so the daemon's metrics.go stays as it is).
type snapshotMetrics struct {
	save, restore, warm prometheus.Histogram
}

func (d *Daemon) snapMetrics() *snapshotMetrics {
	d.snapMetricsOnce.Do(func() {
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
		for _, c := range []prometheus.Collector{m.save, m.restore, m.warm} {
			if err := d.metrics.reg.Register(c); err != nil {
				d.log.Warn("register snapshot metric", "err", err)
			}
		}
		d.snapM = m
	})
	return d.snapM
}

// startSandbox is the manager call of a create: a boot, or with warm a
// restore from the image's warm template.
func (d *Daemon) startSandbox(ctx context.Context, warm bool, opts sandbox.Options) (*sandbox.Sandbox, error) {
	if !warm {
		return d.mgr.Create(ctx, opts)
	}
	start := time.Now()
	sb, err := d.warm.Create(ctx, opts)
	if err == nil {
		d.snapMetrics().warm.Observe(time.Since(start).Seconds())
	}
	return sb, err
}

// SaveSnapshot implements apiserver.SnapshotBackend.
func (d *Daemon) SaveSnapshot(ctx context.Context, ref string, req api.SaveSnapshotRequest) (api.Snapshot, error) {
	start := time.Now()
	if err := d.adm.admitting(); err != nil {
		return api.Snapshot{}, err
	}
	sb, err := d.get(ctx, ref)
	if err != nil {
		return api.Snapshot{}, err
	}
	var raw []byte
	if b := d.box(sb.ID); b != nil {
		raw = b.sb.ExecAccount().Encode()
	}
	rec, err := d.snaps.Save(ctx, sb, req.Name, raw)
	args := map[string]any{"name": req.Name}
	if err == nil {
		args["snapshot"], args["save_ms"], args["vmstate_bytes"], args["disk_bytes"] = rec.ID, rec.SaveMs, rec.VMStateBytes, rec.DiskBytes
	}
	d.auditAction(ctx, sb.ID, audit.ActionSnapshotSave, args, start, err)
	if err != nil {
		return api.Snapshot{}, err
	}
	d.snapMetrics().save.Observe(float64(rec.SaveMs) / 1000)
	d.events.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSnapshotSaved, Sandbox: sb.ID, Name: sb.Name, Reason: "snapshot " + rec.Name})
	return d.snapshotView(rec), nil
}

// ListSnapshots implements apiserver.SnapshotBackend.
func (d *Daemon) ListSnapshots(ctx context.Context, ref string) ([]api.Snapshot, error) {
	id := ""
	if ref != "" {
		if sb, err := d.get(ctx, ref); err == nil {
			id = sb.ID
		} else if isID(ref) {
			id = ref // a removed sandbox's snapshots, by its ID
		} else {
			return nil, sandbox.ErrNotFound.WithMessage(fmt.Sprintf("no sandbox named %q: the snapshots of a removed sandbox are listed by its ID (see `agentbox snapshot ls`)", ref))
		}
	}
	recs, err := d.snaps.List(id)
	if err != nil {
		return nil, err
	}
	out := make([]api.Snapshot, 0, len(recs))
	for _, r := range recs {
		if !tenant.Sees(ctx, r.Tenant) {
			continue // another tenant's
		}
		out = append(out, d.snapshotView(r))
	}
	return out, nil
}

// GetSnapshot implements apiserver.SnapshotBackend.
func (d *Daemon) GetSnapshot(ctx context.Context, name string) (api.Snapshot, error) {
	rec, err := d.snapshot(ctx, name)
	if err != nil {
		return api.Snapshot{}, err
	}
	return d.snapshotView(rec), nil
}

// DeleteSnapshot implements apiserver.SnapshotBackend.
func (d *Daemon) DeleteSnapshot(ctx context.Context, name string) error {
	start := time.Now()
	rec, err := d.snapshot(ctx, name)
	if err != nil {
		return err
	}
	err = d.snaps.Delete(ctx, rec.ID)
	d.auditAction(ctx, rec.SandboxID, audit.ActionSnapshotDelete, map[string]any{"name": rec.Name, "snapshot": rec.ID}, start, err)
	if err != nil {
		return err
	}
	d.events.publish(api.Event{Time: time.Now().UTC(), Type: api.EventSnapshotRemoved, Sandbox: rec.SandboxID, Name: rec.SandboxName, Reason: "snapshot " + rec.Name, Tenant: rec.Tenant})
	return nil
}

// RestoreSnapshot implements apiserver.SnapshotBackend: it loads the
// snapshot's image (refused when its digest changed), admits the
// resources like a create, and starts the new sandbox with the snapshot's
// lifetime limits overridden by the request's (its resources and network
// policy are the snapshot's).
func (d *Daemon) RestoreSnapshot(ctx context.Context, name string, req api.RestoreRequest) (api.Sandbox, error) {
	start := time.Now()
	caller := api.CallerFrom(ctx).ID
	args := map[string]any{"snapshot": name}
	if req.Name != "" {
		args["name"] = req.Name
	}
	ctx = d.withPolicyTrail(ctx) // policy.go
	sb, err := d.restore(ctx, name, req)
	d.auditMade(ctx, audit.ActionRestore, caller, start, args, sb, err, func(sb *sandbox.Sandbox) {
		t := sb.LastRestore()
		args["copy_ms"], args["source_pause_ms"], args["load_ms"] = t.Copy.Milliseconds(), t.SourcePause.Milliseconds(), t.Load.Milliseconds()
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	d.snapMetrics().restore.Observe(time.Since(start).Seconds())
	return d.view(sb), nil
}

func (d *Daemon) restore(ctx context.Context, name string, req api.RestoreRequest) (_ *sandbox.Sandbox, err error) {
	if err := d.adm.admitting(); err != nil {
		return nil, err
	}
	rec, err := d.snapshot(ctx, name)
	if err != nil {
		return nil, err
	}
	// The new sandbox is the snapshot's tenant's (also when the admin
	// restores it) and counts against its quota.
	release, err := d.tenants.reserve(ctx, d.tenants.named(rec.Tenant), rec.VCPUs, rec.MemoryMiB) // tenants.go
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release() // a failed restore holds nothing
		}
	}()
	img, err := image.Load(ctx, rec.ImageDir, image.LoadOptions{VerifyCacheDir: d.cfg.ImageVerifyCacheDir})
	if err != nil {
		return nil, sandbox.ErrSnapshotUnusable.WithMessage(fmt.Sprintf("snapshot %q needs its image %s (sha256:%s), which no longer loads: %v: put the image back or remove the snapshot", rec.Name, rec.ImageDir, rec.ImageDigest, err))
	}
	ex, err := sandbox.DecodeExecAccount(rec.Extra)
	if err != nil {
		d.log.Warn("snapshot extra unreadable", "snapshot", rec.Name, "err", err)
	}
	if err := d.policyRestore(ctx, &req, rec, img, api.Limits(ex.Limits), &ex.Env); err != nil { // policy.go
		return nil, err
	}
	raw := sandbox.ExecAccount{Limits: sandbox.ExecLimits(mergeLimits(req.Limits, api.Limits(ex.Limits))), Creator: api.CallerFrom(ctx).ID, Env: ex.Env}.Encode()
	sb, err := d.snaps.Restore(ctx, rec.ID, snapshot.RestoreOptions{
		Image: img, Name: req.Name, Labels: req.Labels, Extra: raw, Admit: d.adm.admit, Tenant: rec.Tenant,
	})
	if err != nil {
		return nil, err
	}
	d.tenants.keep(sb.ID, sb.Tenant(), release)
	if _, gone := d.mgr.Get(sb.ID); gone != nil {
		d.tenants.removed(sb.ID) // removed before its hold was kept
	}
	d.addBox(sb)
	d.dropInheritedProcesses(ctx, sb) // procs.go
	sb.Touch()
	return sb, nil
}

// snapshotView renders a snapshot record for the API; SourceRemoved says
// whether the manager still knows the snapshotted sandbox.
func (d *Daemon) snapshotView(r sandbox.SnapshotRecord) api.Snapshot {
	_, err := d.mgr.Get(r.SandboxID)
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

var _ apiserver.WarmBackend = (*Daemon)(nil)

// ListWarm implements apiserver.WarmBackend.
func (d *Daemon) ListWarm(ctx context.Context) ([]api.WarmTemplate, error) {
	ts := d.warm.Templates()
	out := make([]api.WarmTemplate, 0, len(ts))
	for _, t := range ts {
		out = append(out, api.WarmTemplate{
			Key: t.Key, Image: api.ImageRef{Name: t.ImageName, Digest: digest(t.ImageDigest), Dir: t.ImageDir},
			DomainType: t.DomainType, VCPUs: t.VCPUs, MemoryMiB: t.MemoryMiB, DiskMiB: t.DiskMiB, Network: t.Network,
			SizeBytes: t.SizeBytes, CreatedAt: t.CreatedAt, BuildMs: t.BuildMs, LastUsedAt: t.LastUsed, Pooled: t.Pooled,
		})
	}
	return out, nil
}

// DeleteWarm implements apiserver.WarmBackend.
func (d *Daemon) DeleteWarm(ctx context.Context, key string) error {
	if err := adminOnly(ctx, "removing a warm template"); err != nil { // tenants.go
		return err
	}
	if err := d.warm.Delete(ctx, key); err != nil {
		return err
	}
	d.log.Info("warm template removed", "key", key, "caller", api.CallerFrom(ctx).ID)
	return nil
}

// startWarm applies the warm settings and refills the pools of existing
// templates in the background (after Reconcile removed a previous
// daemon's pool leftovers).
func (d *Daemon) startWarm() {
	d.warm.SetTemplates(d.cfg.WarmTemplates)
	verify := d.cfg.ImageVerifyCacheDir
	d.warm.Refill(func(ctx context.Context, dir string) (*image.Image, error) {
		return image.Load(ctx, dir, image.LoadOptions{VerifyCacheDir: verify})
	})
}
