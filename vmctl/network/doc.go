// Package network gives a sandbox with a network policy other than none
// its own link to the host and holds that link to the policy, on the host,
// where a guest with root cannot lift it:
//
//   - a tap device per sandbox ([TapName]: "abx" + the 12 hex digits of the
//     sandbox ID, 15 bytes, the kernel's IFNAMSIZ-1), created persistent
//     with netlink before the domain starts and handed to libvirt as
//     <interface type='ethernet'><target dev='…' managed='no'/>;
//   - a /30 per sandbox from a configurable pool (default 10.213.0.0/16):
//     the host side H is set on the tap, the guest side G is given to the
//     guest on its kernel command line (agentbox.net=G/30,gw=H,dns=H,mac=M),
//     where the guest agent configures the NIC whose MAC is M;
//   - nftables rules (one inet table per daemon, default "agentbox") keyed
//     on the tap's name: from the tap to any host address only UDP/TCP 53
//     and the policy's TCP ports on H (the egress service: resolver, SNI /
//     Host-checking proxy, host:PORT forwarders); forwarded traffic only to
//     the policy's CIDR:PORT rules (allowlist) or anywhere but link-local,
//     loopback, multicast and other sandboxes (open), masqueraded; IPv6
//     dropped; source addresses other than G dropped; replies via conntrack.
//     A sandbox with a network cap also has a limit object ([OutLimit]) whose
//     drop rule comes first in both its chains: one budget for everything
//     the guest sends (the traffic to the guest is shaped on the tap:
//     [LimitTap]).
//     Catch-all rules drop everything from and to the taps of this table
//     (they carry an interface group derived from the table's name, so two
//     daemons never drop each other's) that no sandbox rule accepted, so a
//     tap is never open, not even between its creation and its rules or
//     during teardown.
//
// Why this mechanism (the alternatives were tried on a Debian 12 host with
// libvirt 9.0): an isolated libvirt network still lets the guest reach
// every service of the host (bridge and main IP); nwfilter needs libvirt's
// nwfilter driver and the iptables/ebtables binaries; QEMU user networking
// reaches the host's loopback (10.0.2.2) unless restrict=on and cannot
// filter by name; libvirt 9.0 rejects the passt backend; a guestfwd channel
// did not work. A tap plus nf_tables through netlink needs only the kernel
// (nf_tables, tun) — no bridge, no iptables or nft binary — and works the
// same on plain Debian and NixOS (whose firewall is nftables or iptables-nft
// on the same kernel hooks: a drop anywhere is final, so another table
// cannot re-open what these rules close).
//
// Nothing is left behind: a sandbox's rules and tap are removed when its
// domain is gone (stop, remove, crash) and [Manager.Sweep] removes those of
// sandboxes no record knows when the daemon starts. When the daemon exits,
// [Manager.Release] deletes the table unless a tap of it is left (a
// sandbox running for the next daemon, which needs the rules); [Cleanup]
// (`agentbox serve --network-cleanup`) removes a table and its taps that
// no daemon will come back for. Taps carry an alias naming their table,
// so two daemons (different tables) on one host never touch each other's.
package network
