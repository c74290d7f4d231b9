# The host firewall's rules for agentbox's sandbox taps, as text for
# networking.firewall (nixos-modules/host/firewall.nix). Builtins only, so
# tests/nix (make nix-check) evaluates it without nixpkgs and loads the
# rules into nft and iptables in a network namespace of its own.
#
# Every sandbox with a network has a tap named TAP_PREFIX + 12 hex digits
# (vmctl/network.TapPrefix: "abx") whose host side H is an address of the
# network pool (`serve --network-pool`, default 10.213.0.0/16). The guest
# reaches the egress service on H: the resolver on UDP and TCP 53, the
# name-checking proxy on TCP 80/443 and on the ports of `name:PORT` rules,
# and `host:PORT` forwarders on PORT. Those TCP ports are chosen per sandbox
# by its create request, so no fixed list can name them here. The daemon's
# own nftables table (inet agentbox, hooks at priority mangle, -150, before
# NixOS's filter chains at 0) accepts exactly them per tap, to that tap's H
# only, and drops everything else from its taps; a drop there is final, an
# accept is not (every base chain on the hook still sees the packet). So
# these rules only stop NixOS's firewall from dropping what the daemon let
# through: from the taps, UDP 53 and TCP to pool addresses in the input
# path, and (nftables with filterForward) what the daemon forwards.
# Everything else from a tap, such as UDP to another port or TCP to the
# host's other addresses, stays refused by NixOS's firewall too.
{
  # Interface name prefix of the taps (vmctl/network.TapPrefix).
  tapPrefix ? "abx",
  # IPv4 CIDR the taps' addresses come from (--network-pool).
  pool ? "10.213.0.0/16",
}:

let
  nftIf = ''iifname "${tapPrefix}*"'';
  iptIf = "-i ${tapPrefix}+";
in
{
  inherit tapPrefix pool;

  # For networking.firewall.extraInputRules (nftables backend): appended to
  # the chain input-allow, which the input chain jumps to for new and
  # untracked packets.
  nftablesInput = ''
    ${nftIf} ip daddr ${pool} udp dport 53 accept comment "agentbox: sandbox resolver"
    ${nftIf} ip daddr ${pool} meta l4proto tcp accept comment "agentbox: sandbox egress service; its ports per sandbox are the daemon's table's"
  '';

  # For networking.firewall.extraForwardRules (nftables backend, used when
  # networking.firewall.filterForward is on): the chain forward-allow.
  nftablesForward = ''
    ${nftIf} ip saddr ${pool} accept comment "agentbox: sandbox traffic the daemon's table forwards"
  '';

  # For networking.firewall.extraCommands (iptables backend): run by
  # firewall-start after it made the chain nixos-fw and before its final
  # refuse rule. IPv4 only: the daemon drops IPv6 from its taps.
  iptables = ''
    iptables -w -A nixos-fw ${iptIf} -d ${pool} -p udp --dport 53 -j nixos-fw-accept
    iptables -w -A nixos-fw ${iptIf} -d ${pool} -p tcp -j nixos-fw-accept
  '';
}
