package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/netpolicy"
)

// networkFlag, allowFlag and dnsFlag are create's and run's network
// policy flags.
var (
	networkFlag = &cli.StringFlag{Name: "network", Value: "none", Usage: "network `MODE`: none (no network device), allowlist (only --allow destinations) or open (NAT to the outside; never the host's services, metadata addresses or other sandboxes)"}
	dnsFlag     = &cli.StringFlag{Name: "dns", Usage: "with --network allowlist: `MODE` strict makes the host resolve only names the policy lists (no *.NAME rules: a name below a wildcard is the guest's choice, and resolving it can carry data out) and answer one only when it leads to an address the sandbox may reach; default: allowed names are answered at once"}
	allowFlag   = &cli.StringSliceFlag{Name: "allow", Usage: "with --network allowlist: let the guest reach `DEST` (repeatable): NAME (TCP 80/443, checked against TLS SNI / HTTP Host), NAME:PORT, *.NAME, CIDR:PORT, IP:PORT, or host:PORT (this host's 127.0.0.1:PORT as host.agentbox.internal:PORT; also with open)"}
)

// networkPolicy parses --network, --allow and --dns (errors say what to
// fix).
// An explicit --network allowlist without --allow is legal (a NIC that
// reaches nothing) but likely a mistake: it prints a note on stderr.
func networkPolicy(c *cli.Context) (netpolicy.Policy, error) {
	p, err := netpolicy.Parse(c.String("network"), c.StringSlice("allow"))
	if err == nil {
		p, err = p.WithDNS(c.String("dns"))
	}
	if err == nil && c.IsSet("network") && p.Mode == netpolicy.ModeAllowlist && len(p.Allow) == 0 {
		fmt.Fprintln(c.App.ErrWriter, "agentbox: note: --network allowlist without --allow: the sandbox can resolve and reach nothing")
	}
	return p, err
}

// networkRequest is the API form of --network, --allow and --dns; nil
// when none is given, so the image's default policy applies.
func networkRequest(c *cli.Context) (*api.NetworkPolicy, error) {
	p, err := networkPolicy(c)
	if err != nil {
		return nil, err
	}
	if !c.IsSet("network") && !c.IsSet("allow") && !c.IsSet("dns") {
		return nil, nil
	}
	return &api.NetworkPolicy{Mode: string(p.Mode), Allow: p.Strings(), DNS: string(p.DNS)}, nil
}
