package network

import (
	"context"
	"io"
	"log/slog"
	"net/netip"

	"github.com/agentbox/agentbox/vmctl/egress"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// EgressOptions configure the egress services StartEgress starts.
type EgressOptions struct {
	// Hosts maps names to addresses the egress resolver and proxy use
	// before the host's resolver (the daemon's --network-host NAME=IP);
	// they are trusted (may be loopback or private) but never make a name
	// allowed.
	Hosts map[string][]netip.Addr
	// Resolver resolves allowed names on the host; nil: the host's.
	Resolver egress.Resolver
	// Logger receives the services' logs (key: sandbox); nil discards.
	Logger *slog.Logger
	// OnDecision, if set, sees every allow/deny decision with its
	// sandbox's ID.
	OnDecision func(id string, d egress.Decision)
	// Intercept, if set, returns what the proxy of sandbox id intercepts
	// (the hosts its secrets are bound to; nil: nothing), each time its
	// egress service starts: create, adoption after a daemon restart,
	// start after stop. An error fails that start.
	Intercept func(id string) (*egress.Intercept, error)
}

// StartEgress returns the EgressFunc that starts a vmctl/egress service
// per sandbox on its host address: the resolver on H:53, the SNI/Host
// proxy on the policy's name ports and the host:PORT forwarders. In open
// mode the resolver answers every name (egress.Config.ForwardAll).
func StartEgress(opts EgressOptions) EgressFunc {
	return func(ctx context.Context, id string, att Attachment, policy netpolicy.Policy) (io.Closer, error) {
		cfg := egress.Config{
			Addr:       att.Host,
			Policy:     policy,
			Resolver:   opts.Resolver,
			Hosts:      opts.Hosts,
			ForwardAll: policy.Mode == netpolicy.ModeOpen,
		}
		if opts.Logger != nil {
			cfg.Logger = opts.Logger.With("sandbox", id)
		}
		if opts.OnDecision != nil {
			cfg.OnDecision = func(d egress.Decision) { opts.OnDecision(id, d) }
		}
		if opts.Intercept != nil {
			ic, err := opts.Intercept(id)
			if err != nil {
				return nil, err
			}
			cfg.Intercept = ic
		}
		return egress.Start(ctx, cfg)
	}
}
