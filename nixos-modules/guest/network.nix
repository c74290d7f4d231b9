# Networking of the guest. The host decides everything: with network policy
# "none" the sandbox has no network device at all; otherwise the host puts
# one virtio NIC on a tap of its own and writes its configuration on the
# kernel command line (agentbox.net=G/30,gw=H,dns=H,mac=M). The guest agent
# (agentbox-guest) reads it at start and configures that NIC through
# netlink — address, default route via the host side H, /etc/resolv.conf
# with H as the only nameserver (the host's resolver answers only allowed
# names) and host.agentbox.internal in /etc/hosts — the same way as in the
# Debian test image. No DHCP, no networkd, no resolved, no resolvconf: they
# would only race the agent for the same settings. The policy itself is
# enforced on the host (vmctl/network: nftables keyed on the tap).
{ config, lib, ... }:

let
  cfg = config.agentbox.guest;
in
lib.mkIf cfg.enable {
  networking.useDHCP = false;
  networking.dhcpcd.enable = false;
  networking.useNetworkd = false;
  systemd.network.enable = false;
  services.resolved.enable = false;
  # The agent writes /etc/resolv.conf itself.
  networking.resolvconf.enable = false;
  # The host enforces the policy; a guest firewall would only cost boot time.
  networking.firewall.enable = lib.mkDefault false;
}
