package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// appendAudit writes e to the audit log; a failed write is logged and
// counted, never fails the action it records.
func (c *core) appendAudit(e audit.Entry) { c.writeAudit(e, c.audit.Append) }

// appendGuestAudit is appendAudit for an entry a guest's traffic caused
// (the egress proxy's decisions), not a request: audit.Log.AppendGuest
// cuts its strings (audit.MaxFieldBytes, audit.MaxGuestEntryBytes) and
// limits how many a sandbox gets (audit.GuestBurst, GuestPerSecond).
func (c *core) appendGuestAudit(e audit.Entry) { c.writeAudit(e, c.audit.AppendGuest) }

// writeAudit fills in e's tenant from its sandbox's owner when it has
// none and appends it with write, logging and counting a failure.
func (c *core) writeAudit(e audit.Entry, write func(audit.Entry) error) {
	if e.Tenant == "" && e.Sandbox != "" {
		e.Tenant = c.tenants.owner(e.Sandbox) // tenants.go
	}
	if err := write(e); err != nil {
		c.log.Error("audit log write failed", "err", err, "action", e.Action, "sandbox", e.Sandbox)
		c.metrics.errors.WithLabelValues("audit_write").Inc()
	}
}

// auditEntry is the one builder of the daemon's audit entries: action on
// sandbox id ("" for none) by caller at at, with args. Every entry starts
// here; requestEntry adds what a request's entries carry, and each
// caller adds what is its own (duration, bytes, digests, exit codes)
// before appendAudit writes it (and fills in the tenant from the
// sandbox's owner when it has none).
func auditEntry(at time.Time, id, caller, action string, args map[string]any) audit.Entry {
	return audit.Entry{Time: at.UTC(), Sandbox: id, Caller: caller, Action: action, Args: args}
}

// requestEntry is auditEntry for an action a request asked for, begun at
// start: by the request's caller, for its tenant (auditTenant), with its
// policy decisions (withPolicyTrail) and its duration up to now; err,
// when set, is recorded with the code and message of its API answer
// (auditError).
func (c *core) requestEntry(ctx context.Context, id, action string, args map[string]any, start time.Time, err error) audit.Entry {
	e := auditEntry(start, id, api.CallerFrom(ctx).ID, action, args)
	e.Tenant, e.DurationMs, e.Policy = c.auditTenant(ctx, id), ms(time.Since(start)), policyAudit(ctx)
	if err != nil {
		e.Error, e.ErrorMessage = auditError(err)
	}
	return e
}

// auditAction records a simple action by the request's caller.
func (c *core) auditAction(ctx context.Context, id, action string, args map[string]any, start time.Time, err error) {
	c.appendAudit(c.requestEntry(ctx, id, action, args, start, err))
}

// auditMade is the one audit tail of the actions that make a sandbox, a
// create and a restore (action), begun at start with the request's
// settings in args (requestEntry): the entry carries the request's
// tenant (a failed one has no sandbox to take it from) and its policy
// decisions. A failure (err) is audited with its
// code, message and failed step (sandbox.FailedStep), logged and counted
// in createFailures; a success with sb's ID and the arguments made adds
// to args once the sandbox is there.
func (c *core) auditMade(ctx context.Context, action string, start time.Time, args map[string]any, sb *sandbox.Sandbox, err error, made func(sb *sandbox.Sandbox)) {
	e := c.requestEntry(ctx, "", action, args, start, err)
	if err != nil {
		if step := sandbox.FailedStep(err); step != "" {
			args["step"] = step // the message leaves it out when the request was refused
		}
		c.log.Info(action+" failed", "step", sandbox.FailedStep(err), "err", err)
		c.appendAudit(e)
		c.metrics.createFailures.Inc()
		return
	}
	e.Sandbox = sb.ID
	made(sb)
	c.appendAudit(e)
}

// auditViolation records that sandbox r failed because its guest broke
// the agent protocol (sandbox.Config.OnAgentViolation): a "state" entry
// by the daemon with the state, the reason (sandbox.ReasonProtocolViolation)
// and the violation's message (which frame, which limit).
func (c *core) auditViolation(r sandbox.Record, v error) {
	e := auditEntry(time.Now(), r.ID, "daemon", audit.ActionStateChange, map[string]any{"state": string(r.State), "reason": r.Reason})
	e.Tenant = r.Tenant
	e.Error, e.ErrorMessage = auditError(v)
	c.appendAudit(e)
}

// auditRefusedProcs records that the guest of sb answered a table of
// detached processes over the limit (agent.ErrTooLarge), of which none
// was adopted, when they were taken over (at start-up or a resume).
func (c *core) auditRefusedProcs(sb *sandbox.Sandbox, err error) {
	e := auditEntry(time.Now(), sb.ID, "daemon", audit.ActionReconcile, map[string]any{"result": "refused", "what": "detached processes"})
	e.Error, e.ErrorMessage = auditError(err)
	c.appendAudit(e)
}

// auditReconcile records what the start-up reconciliation did.
func (c *core) auditReconcile() {
	now := time.Now().UTC()
	for _, id := range c.report.Adopted {
		c.appendAudit(auditEntry(now, id, "daemon", audit.ActionReconcile, map[string]any{"result": "adopted"}))
	}
	for id, reason := range c.report.Failed {
		c.appendAudit(auditEntry(now, id, "daemon", audit.ActionReconcile, map[string]any{"result": "failed", "reason": reason}))
	}
	for _, what := range c.report.Cleaned {
		c.appendAudit(auditEntry(now, "", "daemon", audit.ActionReconcile, map[string]any{"result": "cleaned", "what": what}))
	}
}

// Audit implements backend.Backend: the entries of one sandbox (by ID or
// name; by ID also after it was removed) or of all.
func (c *core) Audit(ctx context.Context, ref string, emit func(audit.Entry) error) error {
	f := audit.Filter{}
	if ref != "" {
		if sb, err := c.get(ctx, ref); err == nil {
			f.Sandbox = sb.ID
		} else if isID(ref) {
			f.Sandbox = ref
		} else {
			return sandbox.ErrNotFound.WithMessage(fmt.Sprintf("no sandbox named %q: the audit of a removed sandbox is kept by its ID (find it in `agentbox audit`, GET /v1/audit)", ref))
		}
	}
	return c.audit.Read(f, func(e audit.Entry) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !tenant.Sees(ctx, e.Tenant) {
			return nil // another tenant's
		}
		return emit(e)
	})
}

// isID reports whether ref has the shape of a sandbox ID.
func isID(ref string) bool {
	if len(ref) != 12 {
		return false
	}
	for _, c := range ref {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
