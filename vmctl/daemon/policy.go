package daemon

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/policy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// Policy decides the calls of every front before the daemon makes them
// (Config.Policy; vmctl/policy.Client runs a plugin, `serve --policy`).
// Check returns the decision, or an error when none could be had (the
// call is then refused: fail closed).
type Policy interface {
	Check(ctx context.Context, req policy.Request) (policy.Decision, error)
}

// The hooks: each front method asks the policy before it acts, with the
// caller's and the sandbox's identity, and applies a modify's changes to
// its request. A denied call fails with policy.ErrDenied (403
// policy_denied, the plugin's reason in the message); one the plugin
// could not decide with policy.ErrUnavailable (503 policy_unavailable).
// The decisions travel in the request's context (a policyTrail) into the
// call's own audit entry; a call refused before it would write one
// (exec, process start, files, port forwards) is audited here, as its
// action with the error. Creates and restores audit every failure
// themselves.

// policyTrail collects the decisions of one call for its audit entry.
type policyTrail struct {
	mu sync.Mutex
	ds []audit.PolicyDecision
}

type policyTrailKey struct{}

// withPolicyTrail returns ctx with a trail for the call's decisions (the
// one it has already, if any); ctx itself without a policy.
func (c *core) withPolicyTrail(ctx context.Context) context.Context {
	if c.cfg.Policy == nil {
		return ctx
	}
	if _, ok := ctx.Value(policyTrailKey{}).(*policyTrail); ok {
		return ctx
	}
	return context.WithValue(ctx, policyTrailKey{}, &policyTrail{})
}

// policyAudit returns the decisions recorded in ctx's trail, for the
// call's audit entry; nil without a policy.
func policyAudit(ctx context.Context) []audit.PolicyDecision {
	t, ok := ctx.Value(policyTrailKey{}).(*policyTrail)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.ds)
}

// ask asks the policy about req and records the decision in ctx's trail
// (which the caller installed with withPolicyTrail). It returns the
// decision when the call may go on (allow, modify), else the error:
// ErrDenied with the plugin's reason, ErrUnavailable.
func (c *core) ask(ctx context.Context, req policy.Request) (policy.Decision, error) {
	start := time.Now()
	dec, err := c.cfg.Policy.Check(ctx, req)
	rec := audit.PolicyDecision{Hook: string(req.Hook)}
	switch {
	case err != nil && ctx.Err() != nil:
		return dec, err // the caller went away
	case err != nil:
		if !errdefs.HasReason(err, api.CodePolicyUnavailable) {
			err = policy.ErrUnavailable.WithMessage(fmt.Sprintf("policy: %v; the call was refused (fail closed)", err))
		}
		rec.Decision, rec.Reason = "unavailable", err.Error()
	default:
		rec.Decision, rec.Reason, rec.Rule, rec.Changes = string(dec.Verdict), dec.Reason, dec.Rule, dec.Changes()
		if dec.Verdict == policy.Deny {
			err = policy.ErrDenied.WithMessage(fmt.Sprintf("denied by policy: %s", dec.Reason))
		}
	}
	if t, ok := ctx.Value(policyTrailKey{}).(*policyTrail); ok {
		t.mu.Lock()
		t.ds = append(t.ds, rec)
		t.mu.Unlock()
	}
	c.log.Debug("policy decision", "hook", req.Hook, "sandbox", req.Identity.Sandbox, "caller", req.Identity.Caller,
		"decision", rec.Decision, "rule", rec.Rule, "took", time.Since(start))
	return dec, err
}

// refused audits a call the policy refused before the call's own audit
// entry: its action on sandbox sb with args and the error.
func (c *core) refused(ctx context.Context, sb *sandbox.Sandbox, action string, args map[string]any, err error) {
	c.appendAudit(c.requestEntry(ctx, sb.ID, action, args, time.Now(), err))
}

// identity is the caller's and sb's identity (sb nil: a create's, from
// its request).
func identity(ctx context.Context, sb *sandbox.Sandbox) policy.Identity {
	id := policy.Identity{Caller: api.CallerFrom(ctx).ID, Tenant: tenant.Name(ctx)}
	if sb != nil {
		r := sb.Record()
		id.Sandbox, id.Name, id.Labels, id.Template = r.ID, r.Name, maps.Clone(r.Labels), r.Template
	}
	return id
}

// policyCreate asks about a create (snapshot "") or a restore of
// snapshot, whose image img is loaded, and applies a modify's changes to
// req: caps against what it asks or would get by default (the image's
// size, the daemon's default limits; a restore's are the snapshot's
// size and base limits), labels, env. A restore whose snapshot is
// larger than a size cap is denied (its size cannot change).
func (c *core) policyCreate(ctx context.Context, req *api.CreateSandboxRequest, img *image.Image, snapshot string, base api.Limits) error {
	if c.cfg.Policy == nil {
		return nil
	}
	id := identity(ctx, nil)
	id.Name, id.Labels, id.Template = req.Name, maps.Clone(req.Labels), req.Template
	cr := &policy.CreateRequest{Image: req.Image, Snapshot: snapshot, VCPUs: req.VCPUs, MemoryMiB: req.MemoryMiB,
		TTLSeconds: req.Limits.TTLSeconds, IdleTimeoutSeconds: req.Limits.IdleTimeoutSeconds, ExecTimeoutMs: req.Limits.ExecTimeoutMs,
		EnvKeys: envKeys(req.Env)}
	if req.Template != "" {
		cr.Image = ""
	}
	dec, err := c.ask(ctx, policy.Request{Hook: policy.HookCreate, Identity: id, Create: cr})
	if err != nil || dec.Create == nil {
		return err
	}
	caps := dec.Create
	vcpus, mem := req.VCPUs, req.MemoryMiB
	if vcpus == 0 && img != nil {
		vcpus = img.Manifest.Resources.VCPUs
	}
	if mem == 0 && img != nil {
		mem = img.Manifest.Resources.MemoryMiB
	}
	if snapshot != "" && (caps.MaxVCPUs > 0 && vcpus > caps.MaxVCPUs || caps.MaxMemoryMiB > 0 && mem > caps.MaxMemoryMiB) {
		return policy.ErrDenied.WithMessage(fmt.Sprintf("denied by policy: snapshot %q has %d vCPUs and %d MiB, over the policy's caps (%d vCPUs, %d MiB); a restore keeps its snapshot's size",
			snapshot, vcpus, mem, caps.MaxVCPUs, caps.MaxMemoryMiB))
	}
	if snapshot == "" {
		if caps.MaxVCPUs > 0 && (vcpus == 0 || vcpus > caps.MaxVCPUs) {
			req.VCPUs = caps.MaxVCPUs
		}
		if caps.MaxMemoryMiB > 0 && (mem == 0 || mem > caps.MaxMemoryMiB) {
			req.MemoryMiB = caps.MaxMemoryMiB
		}
	}
	capLimit(&req.Limits.TTLSeconds, base.TTLSeconds, caps.MaxTTLSeconds)
	capLimit(&req.Limits.IdleTimeoutSeconds, base.IdleTimeoutSeconds, caps.MaxIdleTimeoutSeconds)
	capLimit(&req.Limits.ExecTimeoutMs, base.ExecTimeoutMs, caps.MaxExecTimeoutMs)
	if len(caps.SetLabels) > 0 {
		req.Labels = maps.Clone(req.Labels)
		if req.Labels == nil {
			req.Labels = map[string]string{}
		}
		maps.Copy(req.Labels, caps.SetLabels)
	}
	req.Env = policy.StripEnv(req.Env, caps.StripEnv)
	return nil
}

// capLimit sets *v to max when the limit in effect (*v, or base when *v
// is 0) is none (0) or above max; max 0 caps nothing.
func capLimit(v *int64, base, max int64) {
	if max <= 0 {
		return
	}
	eff := *v
	if eff == 0 {
		eff = base
	}
	if eff == 0 || eff > max {
		*v = max
	}
}

// policyNetwork asks about the network policy p a create is to get and
// returns it with a modify's changes applied (checked as a request's).
func (s *lifecycleService) policyNetwork(ctx context.Context, req api.CreateSandboxRequest, p netpolicy.Policy) (netpolicy.Policy, error) {
	if s.cfg.Policy == nil {
		return p, nil
	}
	id := identity(ctx, nil)
	id.Name, id.Labels, id.Template = req.Name, maps.Clone(req.Labels), req.Template
	dec, err := s.ask(ctx, policy.Request{Hook: policy.HookNetwork, Identity: id,
		Network: &policy.NetworkRequest{Mode: string(p.Mode), Allow: p.Strings()}})
	if err != nil || dec.Network == nil {
		return p, err
	}
	mode, allow := string(p.Mode), p.Strings()
	if dec.Network.Mode != "" {
		mode = dec.Network.Mode
	}
	if dec.Network.Allow != nil {
		allow = dec.Network.Allow
	}
	if mode == string(netpolicy.ModeNone) {
		allow = nil
	}
	np, err := netpolicy.Parse(mode, allow)
	if err == nil && p.DNS != netpolicy.DNSDefault {
		np, err = np.WithDNS(string(p.DNS)) // the request's dns mode stays
	}
	if err != nil {
		return p, policy.ErrUnavailable.WithMessage(fmt.Sprintf("policy: the plugin's network change (mode %q, allow %q) is not a valid policy: %v; the create was refused (fail closed)", mode, allow, err))
	}
	return np, nil
}

// policyExec asks about a command on b's sandbox (mode: policy.Exec*)
// and applies a modify's changes to req; a refusal is audited (action
// exec or process.start). The returned context carries the decision.
func (s *execService) policyExec(ctx context.Context, b *box, req *api.ExecRequest, mode string) (context.Context, error) {
	if s.cfg.Policy == nil {
		return ctx, nil
	}
	ctx = s.withPolicyTrail(ctx)
	er := &policy.ExecRequest{Argv: slices.Clone(req.Cmd), EnvKeys: envKeys(req.Env), Cwd: req.Cwd, User: req.User, UID: req.UID,
		TimeoutMs: req.TimeoutMs, Mode: mode, Tty: req.Tty != nil}
	dec, err := s.ask(ctx, policy.Request{Hook: policy.HookExec, Identity: identity(ctx, b.sb), Exec: er})
	if err != nil {
		action := audit.ActionExec
		if mode == policy.ExecDetached {
			action = audit.ActionProcessStart
		}
		if ctx.Err() == nil {
			s.refused(ctx, b.sb, action, map[string]any{"cmd": req.Cmd}, err)
		}
		return ctx, err
	}
	if c := dec.Exec; c != nil {
		if c.MaxTimeoutMs > 0 {
			capLimit(&req.TimeoutMs, b.sb.ExecAccount().Limits.ExecTimeoutMs, c.MaxTimeoutMs)
		}
		req.Env = policy.SetEnv(policy.StripEnv(req.Env, c.StripEnv), c.SetEnv)
		if c.User != "" {
			req.User, req.UID, req.GID = c.User, nil, nil
		}
	}
	return ctx, nil
}

// fileAccess is the access of each file action.
var fileAccess = map[string]struct{ op, access string }{
	audit.ActionUpload:   {policy.FileUpload, policy.AccessWrite},
	audit.ActionDownload: {policy.FileDownload, policy.AccessRead},
	audit.ActionStat:     {policy.FileStat, policy.AccessRead},
	audit.ActionList:     {policy.FileList, policy.AccessRead},
	audit.ActionWatch:    {policy.FileWatch, policy.AccessRead},
	audit.ActionMkdir:    {policy.FileMkdir, policy.AccessWrite},
	audit.ActionMove:     {policy.FileMove, policy.AccessWrite},
	audit.ActionDelete:   {policy.FileRemove, policy.AccessWrite},
}

// policyFile asks about a file action (audit.Action*: its operation and
// access) on path p (and a move's destination) of sandbox ref, and sets
// *owner (nil: the operation writes no owner) from a modify; a refusal
// is audited. The returned context carries the decision.
func (s *filesService) policyFile(ctx context.Context, ref, action, p, dest string, owner *string) (context.Context, error) {
	if s.cfg.Policy == nil {
		return ctx, nil
	}
	sb, err := s.get(ctx, ref)
	if err != nil {
		return ctx, err
	}
	ctx = s.withPolicyTrail(ctx)
	fa := fileAccess[action]
	dec, err := s.ask(ctx, policy.Request{Hook: policy.HookFile, Identity: identity(ctx, sb),
		File: &policy.FileRequest{Op: fa.op, Access: fa.access, Path: p, Destination: dest}})
	if err != nil {
		args := map[string]any{"path": p}
		if dest != "" {
			args = map[string]any{"source": p, "destination": dest}
		}
		if ctx.Err() == nil {
			s.refused(ctx, sb, action, args, err)
		}
		return ctx, err
	}
	if dec.File != nil && dec.File.Owner != "" && owner != nil {
		*owner = dec.File.Owner
	}
	return ctx, nil
}

// policyPort asks about a port forward of b's sandbox and applies a
// modify's host address to req; a refusal is audited. The returned
// context carries the decision.
func (s *portsService) policyPort(ctx context.Context, b *box, req *api.PortForwardRequest) (context.Context, error) {
	if s.cfg.Policy == nil {
		return ctx, nil
	}
	ctx = s.withPolicyTrail(ctx)
	host := req.HostAddr
	if host == "" {
		host = api.DefaultPortHostAddr
	}
	dec, err := s.ask(ctx, policy.Request{Hook: policy.HookPort, Identity: identity(ctx, b.sb),
		Port: &policy.PortRequest{GuestPort: req.GuestPort, HostAddr: host}})
	if err != nil {
		if ctx.Err() == nil {
			s.refused(ctx, b.sb, audit.ActionPortOpen, map[string]any{"guest_port": req.GuestPort, "host_addr": host}, err)
		}
		return ctx, err
	}
	if dec.Port != nil && dec.Port.HostAddr != "" {
		req.HostAddr = strings.TrimSpace(dec.Port.HostAddr)
	}
	return ctx, nil
}

// execDetached is the exec mode of a detached command.
const execDetached = policy.ExecDetached

// execMode is the exec mode of an attached command: interactive when
// stdin streams from the caller.
func execMode(interactive bool) string {
	if interactive {
		return policy.ExecInteractive
	}
	return policy.ExecAttached
}

// policyRestore asks about a restore of snapshot rec (its image img
// loaded, its limits base, its sandbox-wide env *env) as a create, and
// applies a modify's changes to req's labels and limits and to *env.
func (s *snapshotService) policyRestore(ctx context.Context, req *api.RestoreRequest, rec sandbox.SnapshotRecord, img *image.Image, base api.Limits, env *[]string) error {
	if s.cfg.Policy == nil {
		return nil
	}
	cr := api.CreateSandboxRequest{Image: rec.ImageDir, Name: req.Name, Labels: req.Labels, Limits: req.Limits,
		VCPUs: rec.VCPUs, MemoryMiB: rec.MemoryMiB, Env: *env}
	if err := s.policyCreate(ctx, &cr, img, rec.Name, base); err != nil {
		return err
	}
	req.Labels, req.Limits, *env = cr.Labels, cr.Limits, cr.Env
	return nil
}
