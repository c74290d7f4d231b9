package daemon

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/agent"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/audit"
	"github.com/agentbox/agentbox/vmctl/egress"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
	"github.com/agentbox/agentbox/vmctl/sandbox"
	"github.com/agentbox/agentbox/vmctl/secrets"
)

// SecretsIntercept returns the egress services' Intercept
// (network.EgressOptions.Intercept) of a daemon whose state directory is
// stateDir: for sandbox id it reads the secrets file its create wrote
// (STATE/sandboxes/ID/secrets.json, mode 0600; vmctl/secrets) and makes
// the proxy intercept the bound hosts, replacing each secret's
// placeholder in their request headers, with certificates from the
// sandbox's CA. Upstream servers are verified against roots (nil: the
// host's roots). A sandbox without the file intercepts nothing; a file
// that cannot be read (or is readable by others) fails the egress
// service's start: the sandbox then gets no network rather than one whose
// bound hosts would silently get placeholders.
func SecretsIntercept(stateDir string, roots *x509.CertPool) func(id string) (*egress.Intercept, error) {
	return func(id string) (*egress.Intercept, error) {
		set, err := secrets.Load(filepath.Join(sandbox.SandboxesDir(stateDir), id, secrets.FileName))
		if errors.Is(err, secrets.ErrNone) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		iss, err := set.Issuer()
		if err != nil {
			return nil, err
		}
		ic := &egress.Intercept{Hosts: map[string][]egress.Replacement{}, Certificate: iss.Certificate, RootCAs: roots}
		for _, s := range set.Secrets {
			for _, h := range s.Hosts {
				ic.Hosts[h] = append(ic.Hosts[h], egress.Replacement{Placeholder: s.Placeholder, Value: s.Value})
			}
		}
		return ic, nil
	}
}

// createSecrets makes the secrets of a create request (nil without any):
// checked against the sandbox's network policy, their placeholders added
// to the request's default environment (with the CA variables,
// secrets.Set.Env). Errors: 400 invalid_argument for a warm create, a
// name the request's env sets too, and secrets.Check's.
func createSecrets(req *api.CreateSandboxRequest, policy netpolicy.Policy) (*secrets.Set, error) {
	if len(req.Secrets) == 0 {
		return nil, nil
	}
	if req.Warm {
		return nil, errdefs.ErrInvalidArgument.WithMessage("secrets need a cold boot (their CA is installed as the guest boots): drop warm (--warm)")
	}
	specs := make([]secrets.Spec, len(req.Secrets))
	for i, s := range req.Secrets {
		specs[i] = secrets.Spec{Name: s.Name, Value: s.Value, Hosts: s.Hosts}
		if slices.ContainsFunc(req.Env, func(kv string) bool { return strings.HasPrefix(kv, s.Name+"=") }) {
			return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("env sets %s, which is a secret's name: the secret's placeholder goes there; drop one", s.Name))
		}
	}
	set, err := secrets.New(specs, policy, "")
	if err != nil {
		return nil, err
	}
	// The CA variables first, so the request's env may override them.
	env := set.Env()
	n := len(set.Secrets)
	req.Env = append(append(slices.Clone(env[n:]), req.Env...), env[:n]...)
	return set, nil
}

// secretsSteps returns the create's Prepare and GuestReady for set (nil
// for none): the secrets file in the sandbox's directory before its
// network (and proxy) starts, and the CA installed in the guest before
// the sandbox runs.
func secretsSteps(set *secrets.Set) (prepare func(context.Context, *sandbox.Sandbox) error, ready func(context.Context, *agent.Client) error) {
	if set == nil {
		return nil, nil
	}
	prepare = func(ctx context.Context, sb *sandbox.Sandbox) error {
		return set.Save(filepath.Join(sb.Dir, secrets.FileName))
	}
	ready = func(ctx context.Context, c *agent.Client) error {
		if err := c.TrustCA(ctx, set.CACert); err != nil {
			return fmt.Errorf("install the sandbox's CA in the guest (an agent older than trust-ca? rebuild the image): %w", err)
		}
		return nil
	}
	return prepare, ready
}

// secretArgs is the audit argument of a create's secrets: "NAME→HOST,…"
// per secret, never a value.
func secretArgs(specs []api.SecretSpec) []string {
	out := make([]string, len(specs))
	for i, s := range specs {
		out[i] = s.Name + "→" + strings.Join(s.Hosts, ",")
	}
	return out
}

// secretsView returns a sandbox's secrets for the API (names,
// placeholders, hosts), read once from its secrets file and cached.
func (c *core) secretsView(r sandbox.Record) []api.SecretInfo {
	if v, ok := c.secretViews.Load(r.ID); ok {
		return v.([]api.SecretInfo)
	}
	var out []api.SecretInfo
	set, err := secrets.Load(filepath.Join(r.Dir, secrets.FileName))
	if err != nil && !errors.Is(err, secrets.ErrNone) {
		c.log.Warn("read the sandbox's secrets", "sandbox", r.ID, "err", err)
		return nil
	}
	if set != nil {
		for _, s := range set.Secrets {
			out = append(out, api.SecretInfo{Name: s.Name, Placeholder: s.Placeholder, Hosts: slices.Clone(s.Hosts)})
		}
	}
	if !r.State.Final() || set != nil {
		c.secretViews.Store(r.ID, out)
	}
	return out
}

// AuditEgress records a decision of a sandbox's egress proxy about a
// connection it intercepts (egress.KindIntercept: the connection to a
// host a secret is bound to, or a request refused inside it) in the
// audit log, as action egress.intercept by the caller "guest", bounded
// as every guest-caused entry (appendGuestAudit: its strings cut to
// audit.MaxFieldBytes, at most audit.GuestBurst at once, then
// audit.GuestPerSecond, per sandbox); other decisions are not audited.
// Safe for concurrent use.
func (c *core) AuditEgress(id string, dec egress.Decision) {
	if dec.Kind != egress.KindIntercept {
		return
	}
	args := map[string]any{"name": dec.Name, "port": dec.Port, "allowed": dec.Allowed, "reason": dec.Reason}
	if dec.Upstream.IsValid() {
		args["upstream"] = dec.Upstream.String()
	}
	e := auditEntry(time.Now(), id, "guest", audit.ActionEgressIntercept, args)
	if !dec.Allowed {
		e.Error, e.ErrorMessage = "refused", dec.Reason
	}
	c.appendGuestAudit(e) // the guest's strings and rate: bounded
}
