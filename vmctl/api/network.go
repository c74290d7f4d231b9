package api

// NetworkPolicy is a create request's network: the mode and, for
// allowlist, the destinations (see vmctl/netpolicy for the DEST forms:
// NAME, NAME:PORT, *.NAME, CIDR:PORT, IP:PORT, host:PORT). Absent or mode
// "none" gives the sandbox no network device at all.
type NetworkPolicy struct {
	// Mode is "none" (default), "allowlist" or "open".
	Mode string `json:"mode,omitempty"`
	// Allow lists the allowed destinations (allowlist; open takes only
	// host:PORT).
	Allow []string `json:"allow,omitempty"`
	// DNS is "strict" (allowlist only, no wildcard rules: the host
	// resolves only names the policy lists, and answers one only when it
	// leads to an address the sandbox may reach; netpolicy.DNSStrict) or
	// "" for the default.
	DNS string `json:"dns,omitempty"`
}

// NetworkInfo is a sandbox's network as inspect shows it: its policy
// (canonical DEST strings) and, when it has a network device, the
// addresses of its /30 and the host tap.
type NetworkInfo struct {
	// Mode is "none", "allowlist" or "open".
	Mode string `json:"mode"`
	// Allow lists the allowed destinations in canonical form.
	Allow []string `json:"allow,omitempty"`
	// Address is the guest's address with its prefix length, e.g.
	// "10.213.0.2/30"; empty for mode none.
	Address string `json:"address,omitempty"`
	// Gateway is the host side of the subnet: the guest's gateway,
	// resolver and egress proxy (host.agentbox.internal).
	Gateway string `json:"gateway,omitempty"`
	// Tap is the host's tap device of the sandbox.
	Tap string `json:"tap,omitempty"`
	// MAC is the guest NIC's MAC address.
	MAC string `json:"mac,omitempty"`
	// DNS is "strict" for a policy created with dns strict; "" otherwise.
	DNS string `json:"dns,omitempty"`
	// PrivateBlocked says the sandbox reaches no private (RFC 1918),
	// CGNAT (100.64.0.0/10) or ULA (fc00::/7) destination in any mode: a
	// tenant's sandbox unless the daemon runs with
	// --tenant-private-networks.
	PrivateBlocked bool `json:"private_blocked,omitempty"`
}
