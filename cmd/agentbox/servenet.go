package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/egress"
	"github.com/agentbox/agentbox/vmctl/network"
	"github.com/agentbox/agentbox/vmctl/sandbox"
)

// networkFlags are serve's flags of the sandboxes' network (vmctl/network).
func networkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "network-pool", Value: network.DefaultPool.String(), Usage: "IPv4 `CIDR` the sandboxes' /30 subnets come from (subnets already on a host interface are skipped)"},
		&cli.StringFlag{Name: "network-table", Value: network.DefaultTable, Usage: "nftables table (family inet) of this daemon's firewall rules; two daemons on one host need two `NAME`s"},
		&cli.StringSliceFlag{Name: "network-host", Usage: "resolve `NAME=IP` on the host for allowlisted names (repeatable; before the host's resolver; trusted, may be loopback)"},
		secretsUpstreamCAFlag, // servesecrets.go
		&cli.BoolFlag{Name: "network-cleanup", Usage: "do not serve: remove the nftables table --network-table and its taps, which a daemon leaves while sandboxes run for the next daemon, then exit (when that daemon will never come back; refused while a daemon answers on --socket)"},
	}
}

// newNetwork builds the daemon's network provider from the flags. Without
// the privileges it needs (CAP_NET_ADMIN, nf_tables, /dev/net/tun) it logs
// why and returns nil: the daemon then refuses network policies other
// than none with that reason, and everything else works.
// The proxies intercept the hosts sandboxes' secrets are bound to (their
// files under stateDir) and hand those decisions to aud.
func newNetwork(c *cli.Context, log *slog.Logger, stateDir string, aud *egressAudit) (sandbox.NetworkProvider, func(), error) {
	pool, err := netip.ParsePrefix(c.String("network-pool"))
	if err != nil {
		return nil, nil, fmt.Errorf("--network-pool %q: want an IPv4 CIDR such as %s", c.String("network-pool"), network.DefaultPool)
	}
	hosts := map[string][]netip.Addr{}
	for _, kv := range c.StringSlice("network-host") {
		name, ip, ok := strings.Cut(kv, "=")
		addr, err := netip.ParseAddr(ip)
		if !ok || name == "" || err != nil {
			return nil, nil, fmt.Errorf("--network-host %q: want NAME=IP, e.g. example.test=127.0.0.1", kv)
		}
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		hosts[name] = append(hosts[name], addr)
	}
	roots, err := secretsRoots(c) // servesecrets.go
	if err != nil {
		return nil, nil, err
	}
	m, err := network.New(network.Config{
		Pool:  pool,
		Table: c.String("network-table"),
		Egress: network.StartEgress(network.EgressOptions{
			Hosts:  hosts,
			Logger: log,
			OnDecision: func(id string, d egress.Decision) {
				log.Debug("egress decision", "sandbox", id, "kind", d.Kind, "allowed", d.Allowed, "name", d.Name, "port", d.Port, "reason", d.Reason)
				aud.decide(id, d)
			},
			Intercept: daemon.SecretsIntercept(stateDir, roots),
		}),
		Logger: log,
	})
	if err != nil {
		log.Warn("sandbox networks are unavailable (only --network none works)", "err", err)
		return nil, func() {}, nil
	}
	return m, func() {
		if _, err := m.Release(context.Background()); err != nil {
			log.Warn("release the sandbox network table", "table", m.Table(), "err", err)
		}
	}, nil
}

// networkCleanup implements `serve --network-cleanup`: with the API
// socket held (so no daemon serves it), it removes the table and taps of
// --network-table and prints what it removed.
func networkCleanup(c *cli.Context) error {
	removed, err := network.Cleanup(c.Context, c.String("network-table"))
	for _, r := range removed {
		fmt.Fprintf(c.App.Writer, "removed %s\n", r)
	}
	if err != nil {
		return fmt.Errorf("--network-cleanup (run as root): %w", err)
	}
	if len(removed) == 0 {
		fmt.Fprintf(c.App.Writer, "nothing to remove: no table inet %s and no taps of it\n", c.String("network-table"))
	}
	return nil
}
