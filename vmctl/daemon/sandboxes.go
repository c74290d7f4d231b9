package daemon

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/backend"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/sandbox/resources"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

var _ backend.Backend = (*Daemon)(nil)

// Info implements backend.Backend.
func (c *core) Info(ctx context.Context) (api.Info, error) {
	used := c.mgr.Resources()
	counts := map[string]int{}
	for _, sb := range c.mgr.List() {
		if !tenant.Sees(ctx, sb.Tenant()) {
			continue // a tenant counts its own
		}
		counts[string(sb.State())]++
	}
	return api.Info{
		Version: c.cfg.Version,
		API:     "v1",
		Capacity: api.Capacity{
			MemoryMiB: c.adm.memoryMiB, VCPUs: c.adm.vcpus,
			UsedMemoryMiB: used.UsedMemoryMiB, UsedVCPUs: used.UsedVCPUs,
		},
		Sandboxes: counts,
	}, nil
}

// CreateSandbox implements backend.Backend: it loads and checks the image,
// chooses the accelerator, admits the resources against the capacity
// and boots the sandbox. In a cluster (SetCluster) the cluster places it
// instead, and the node that takes it calls CreateLocal.
func (s *lifecycleService) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (api.Sandbox, error) {
	if c := s.placed(ctx); c != nil { // cluster.go: the cluster's queue places it
		owner, _ := tenant.From(ctx)
		if err := owner.CheckPriority(req.Priority); err != nil {
			return api.Sandbox{}, err // before it is queued at that priority
		}
		if req.Network != nil { // the node that takes it checks the image's default too
			policy, err := networkPolicy(req.Network, nil)
			if err != nil {
				return api.Sandbox{}, err
			}
			if err := owner.CheckHostPorts(policy.HostPorts()); err != nil {
				return api.Sandbox{}, err // before it is queued
			}
		}
		return c.Place(ctx, req)
	}
	start := time.Now()
	args := createArgs(req) // createaudit.go

	ctx = s.withPolicyTrail(ctx) // policy.go: the decisions go into the entry
	sb, err := s.create(ctx, req)
	s.auditMade(ctx, audit.ActionCreate, start, args, sb, err, func(sb *sandbox.Sandbox) {
		args["vcpus"], args["memory_mib"], args["accel"] = sb.VCPUs, sb.Memory, string(sb.Accel.Accel)
		args["network"] = networkArg(sb.Record())
		resourceArgs(args, sb.Record()) // resources.go
		if b := s.box(sb.ID); b != nil {
			lim := b.sb.ExecAccount().Limits
			limitArgs(args, api.Limits(lim))
		}
	})
	if err != nil {
		return api.Sandbox{}, err
	}
	s.metrics.boot.Observe(sb.BootTime.Seconds())
	return s.view(sb), nil
}

func (s *lifecycleService) create(ctx context.Context, req api.CreateSandboxRequest) (_ *sandbox.Sandbox, err error) {
	if err := s.adm.admitting(); err != nil {
		return nil, err
	}
	owner, _ := tenant.From(ctx)
	if err := owner.CheckPriority(req.Priority); err != nil {
		return nil, err
	}
	imageDir, template, err := s.templateImage(req) // templates.go
	if err != nil {
		return nil, err
	}
	req.Image = imageDir
	if !filepath.IsAbs(req.Image) {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("image %q: give the image directory as an absolute path on the daemon's host", req.Image))
	}
	img, err := image.Load(ctx, req.Image, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
	if err != nil {
		return nil, image.ErrInvalid.WithMessage(err.Error())
	}
	if err := s.policyCreate(ctx, &req, img, "", s.cfg.Defaults); err != nil { // policy.go
		return nil, err
	}
	mode := accel.ModeAuto
	if req.Accel != "" {
		if mode, err = accel.ParseMode(req.Accel); err != nil {
			return nil, errdefs.ErrInvalidArgument.WithMessage(err.Error())
		}
	}
	choice, err := s.cfg.Accel(mode)
	if err != nil {
		return nil, errdefs.ErrFailedPrecondition.WithMessage(fmt.Sprintf("accelerator: %v", err))
	}
	policy, err := networkPolicy(req.Network, img)
	if err != nil {
		return nil, err
	}
	// host:PORT rules (the request's or the image's default) splice the
	// guest to the host's loopback: a tenant has only the ports the
	// operator granted (a policy plugin, the operator's, may add more).
	if err := owner.CheckHostPorts(policy.HostPorts()); err != nil {
		return nil, err
	}
	if policy, err = s.policyNetwork(ctx, req, policy); err != nil { // policy.go
		return nil, err
	}
	if policy, err = tenantNetwork(ctx, policy, s.cfg.TenantPrivateNetworks); err != nil { // network.go
		return nil, err
	}
	if err := s.adm.applyCeilings(ctx, img, &req); err != nil {
		return nil, err
	}
	if err := s.adm.applyNetCeiling(&req, policy); err != nil { // netrate.go
		return nil, err
	}
	set, err := createSecrets(&req, policy) // secrets.go: the placeholders join req.Env
	if err != nil {
		return nil, err
	}
	prepare, guestReady := secretsSteps(set)
	vcpus, memoryMiB, _ := resources.Resolve(img, req.VCPUs, req.MemoryMiB, resourceRequest(req))
	release, err := s.tenants.reserve(ctx, owner, vcpus, memoryMiB) // tenants.go
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			release() // a failed create holds nothing
		}
	}()
	raw := sandbox.ExecAccount{Limits: sandbox.ExecLimits(mergeLimits(req.Limits, s.cfg.Defaults)), Creator: api.CallerFrom(ctx).ID, Env: req.Env}.Encode()
	// The boot is not bound to the request: a client that goes away
	// mid-boot must not leave a half-made sandbox, so the manager's revert
	// runs either way (it is under context.WithoutCancel).
	sb, err := s.startSandbox(ctx, req.Warm, sandbox.Options{
		Image: img, Accel: choice, Name: req.Name, Labels: req.Labels, Extra: raw,
		Template: template, Tenant: tenant.Name(ctx), VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB,
		BootTimeout:       time.Duration(req.BootTimeoutMs) * time.Millisecond,
		Admit:             s.adm.admit,
		Network:           policy,
		GuestAgentChannel: s.cfg.GuestAgentChannel,
		Resources:         resourceRequest(req),
		Prepare:           prepare,
		GuestReady:        guestReady,
	})
	if err != nil {
		return nil, err
	}
	s.tenants.keep(sb.ID, sb.Tenant(), release)
	if _, gone := s.mgr.Get(sb.ID); gone != nil {
		s.tenants.removed(sb.ID) // removed before its hold was kept
	}
	s.addBox(sb)
	sb.Touch()
	return sb, nil
}

// ListSandboxes implements backend.Backend.
func (c *core) ListSandboxes(ctx context.Context, labels map[string]string, state string) ([]api.Sandbox, error) {
	out := []api.Sandbox{}
	for _, sb := range c.mgr.List() {
		if state != "" && string(sb.State()) != state {
			continue
		}
		if !tenant.Sees(ctx, sb.Tenant()) {
			continue // another tenant's
		}
		match := true
		for k, v := range labels {
			if got, ok := sb.Labels[k]; !ok || got != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, c.view(sb))
		}
	}
	return out, nil
}

// GetSandbox implements backend.Backend.
func (c *core) GetSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	sb, err := c.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	v := c.view(sb)
	v.QEMU = c.qemuView(ctx, sb) // qemuuser.go
	return v, nil
}

// HasSandbox reports whether this daemon has the sandbox ref (an ID or a
// name), whatever its tenant or state: a cluster serves such a request
// here without asking the directory (clusterproxy.Config.Local).
func (c *core) HasSandbox(ref string) bool {
	_, err := c.mgr.Get(ref)
	return err == nil
}

// StopSandbox implements backend.Backend.
func (s *lifecycleService) StopSandbox(ctx context.Context, ref string) (api.Sandbox, error) {
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return api.Sandbox{}, err
	}
	err = s.mgr.Stop(ctx, sb, "stopped by "+api.CallerFrom(ctx).ID)
	s.auditAction(ctx, sb.ID, audit.ActionStop, nil, start, err)
	if err != nil {
		return api.Sandbox{}, err
	}
	s.forwards.closePorts(sb.ID, "sandbox stopped", false) // now, not when onChange's goroutine gets to it
	return s.view(sb), nil
}

// DeleteSandbox implements backend.Backend.
func (s *lifecycleService) DeleteSandbox(ctx context.Context, ref string, force bool) error {
	start := time.Now()
	sb, err := s.get(ctx, ref)
	if err != nil {
		return err
	}
	err = s.mgr.Remove(ctx, sb, force)
	s.auditAction(ctx, sb.ID, audit.ActionRemove, map[string]any{"force": force}, start, err)
	if err != nil {
		return err
	}
	s.forwards.closePorts(sb.ID, "sandbox removed", true) // now, not when onChange's goroutine gets to it
	if err := s.store.DeleteExecs(sb.ID); err != nil {
		s.log.Warn("delete exec history", "sandbox", sb.ID, "err", err)
	}
	return nil
}

// view renders sb for the API.
func (c *core) view(sb *sandbox.Sandbox) api.Sandbox {
	r := sb.Record()
	v := api.Sandbox{
		ID: r.ID, Name: r.Name, Node: c.cfg.Node, State: string(r.State), Reason: r.Reason,
		Image:    api.ImageRef{Name: r.ImageName, Digest: digest(r.ImageDigest), Dir: r.ImageDir},
		Template: r.Template,
		Domain:   r.Domain, Accel: r.Accel, VCPUs: r.VCPUs, MemoryMiB: r.MemoryMiB,
		Labels: maps.Clone(r.Labels), CreatedAt: r.CreatedAt, BootMs: r.BootMs,
		StartedAt: timePtr(r.StartedAt), StoppedAt: timePtr(r.StoppedAt),
	}
	v.Tenant = r.Tenant
	if b := c.box(sb.ID); b != nil {
		a := b.sb.ExecAccount()
		v.ExecCount, v.Limits, v.LastActivityAt = a.ExecCount, api.Limits(a.Limits), timePtr(a.LastActivity)
	}
	if v.Limits.TTLSeconds > 0 {
		v.ExpiresAt = timePtr(r.CreatedAt.Add(time.Duration(v.Limits.TTLSeconds) * time.Second))
	}
	if r.Spec != nil {
		v.Tainted = r.Spec.Taints()
	}
	v.Network = networkView(r)
	v.Ports = c.forwards.portViews(sb.ID) // ports.go
	viewResources(r, &v, c.usage.latest)  // resources.go
	v.Paused = pauseView(r, v.Limits)     // lifecycle.go
	v.Secrets = c.secretsView(r)          // secrets.go
	return v
}

func (c *core) box(id string) *box {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boxes[id]
}

// running resolves ref to a running sandbox's box, or the
// API error saying why not.
func (c *core) running(ctx context.Context, ref string) (*box, error) {
	if err := c.adm.admitting(); err != nil {
		return nil, err
	}
	sb, err := c.get(ctx, ref)
	if err != nil {
		return nil, err
	}
	b := c.box(sb.ID)
	if b != nil && sb.State() == sandbox.StatePaused {
		return nil, sandbox.ErrNotRunning.WithMessage(pausedMessage(sb)) // lifecycle.go
	}
	if b == nil || sb.State() != sandbox.StateRunning {
		r := sb.Record()
		msg := fmt.Sprintf("sandbox %s is %s", sb.ID, r.State)
		if r.Reason != "" {
			msg += " (" + r.Reason + ")"
		}
		if r.State.Final() {
			msg += ": start it again (agentbox start " + sb.ID + ") or create a new sandbox"
		} else {
			msg += ": wait until it runs, or create a new sandbox"
		}
		return nil, sandbox.ErrNotRunning.WithMessage(msg)
	}
	return b, nil
}

func mergeLimits(req, def api.Limits) api.Limits {
	if req.TTLSeconds == 0 {
		req.TTLSeconds = def.TTLSeconds
	}
	if req.IdleTimeoutSeconds == 0 {
		req.IdleTimeoutSeconds = def.IdleTimeoutSeconds
	}
	if req.ExecTimeoutMs == 0 {
		req.ExecTimeoutMs = def.ExecTimeoutMs
	}
	if req.MaxExecs == 0 {
		req.MaxExecs = def.MaxExecs
	}
	return req
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// digest renders an image digest as the API documents it: "sha256:" and
// 64 hex digits (vmctl/image keeps the bare hex).
func digest(hex string) string {
	if hex == "" || strings.HasPrefix(hex, "sha256:") {
		return hex
	}
	return "sha256:" + hex
}
