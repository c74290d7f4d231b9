package main

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/host"
	"github.com/agentbox/agentbox/vmctl/network"
)

// networkFlags are serve's flags of the sandboxes' network (vmctl/network).
func networkFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "network-pool", Value: network.DefaultPool.String(), Usage: "IPv4 `CIDR` the sandboxes' /30 subnets come from (subnets already on a host interface are skipped)"},
		&cli.StringFlag{Name: "network-table", Value: network.DefaultTable, Usage: "nftables table (family inet) of this daemon's firewall rules; two daemons on one host need two `NAME`s"},
		&cli.StringSliceFlag{Name: "network-host", Usage: "resolve `NAME=IP` on the host for allowlisted names (repeatable; before the host's resolver; trusted, may be loopback)"},
		secretsUpstreamCAFlag, // servesecrets.go
		&cli.BoolFlag{Name: "tenant-private-networks", Usage: "let tenants' sandboxes reach private (RFC 1918), CGNAT (100.64.0.0/10) and ULA (fc00::/7) destinations, as the admin's do; by default a tenant's sandbox reaches none of them in any mode and its CIDR rules into them are refused (see docs/network.md)"},
		&cli.BoolFlag{Name: "network-cleanup", Usage: "do not serve: remove the nftables table --network-table and its taps, which a daemon leaves while sandboxes run for the next daemon, then exit (when that daemon will never come back; refused while a daemon answers on --socket)"},
	}
}

// serveNetworkOptions reads serve's network flags: --network-pool,
// --network-table, --network-host, --secrets-upstream-ca and
// --tenant-private-networks.
func serveNetworkOptions(c *cli.Context) (host.NetworkOptions, error) {
	pool, err := netip.ParsePrefix(c.String("network-pool"))
	if err != nil {
		return host.NetworkOptions{}, fmt.Errorf("--network-pool %q: want an IPv4 CIDR such as %s", c.String("network-pool"), network.DefaultPool)
	}
	hosts := map[string][]netip.Addr{}
	for _, kv := range c.StringSlice("network-host") {
		name, ip, ok := strings.Cut(kv, "=")
		addr, err := netip.ParseAddr(ip)
		if !ok || name == "" || err != nil {
			return host.NetworkOptions{}, fmt.Errorf("--network-host %q: want NAME=IP, e.g. example.test=127.0.0.1", kv)
		}
		name = strings.TrimSuffix(strings.ToLower(name), ".")
		hosts[name] = append(hosts[name], addr)
	}
	roots, err := secretsRoots(c) // servesecrets.go
	if err != nil {
		return host.NetworkOptions{}, err
	}
	return host.NetworkOptions{Pool: pool, Table: c.String("network-table"), Hosts: hosts, SecretsRoots: roots,
		TenantPrivate: c.Bool("tenant-private-networks")}, nil
}

// networkCleanup implements `serve --network-cleanup`: with the API
// socket of o held (host.Listen, so no daemon serves it), it removes the
// table and taps of --network-table and prints what it removed.
func networkCleanup(c *cli.Context, o host.Options) error {
	listeners, err := host.Listen(o)
	if err != nil {
		return err
	}
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
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
