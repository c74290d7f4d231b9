# Networking of the guest follows agentbox.guest.network.policy: with "none"
# (the default) the guest has no network device and runs no network service;
# otherwise systemd-networkd brings the first Ethernet link up with DHCP.
# The policy itself is enforced on the host.
{ config, lib, ... }:

let
  cfg = config.agentbox.guest;
  on = cfg.network.policy != "none";
in
lib.mkIf cfg.enable {
  networking.useDHCP = false;
  networking.dhcpcd.enable = false;
  # The host enforces the policy; a guest firewall would only cost boot time.
  networking.firewall.enable = lib.mkDefault false;
  networking.useNetworkd = on;
  systemd.network.enable = on;
  systemd.network.wait-online.enable = false;
  systemd.network.networks."10-agentbox-uplink" = lib.mkIf on {
    matchConfig.Type = "ether";
    networkConfig.DHCP = "ipv4";
    linkConfig.RequiredForOnline = "no";
  };
  services.resolved.enable = lib.mkDefault on;
}
