# NixOS's firewall (networking.firewall, on by default) and the sandboxes'
# taps. Its input chain drops what no rule of its own accepts, on the same
# hook as the daemon's table, so without these rules a guest's DNS queries
# and proxy connections to the host side of its tap never arrive. The rules
# and why they are enough are in ./firewall-rules.nix.
#
# Options used (nixpkgs nixos/modules/services/networking/): firewall.nix
# (enable, backend), firewall-nftables.nix (extraInputRules,
# extraForwardRules, which the nftables backend appends to its input-allow
# and forward-allow chains) and firewall-iptables.nix (extraCommands, run
# before the final refuse rule of the chain nixos-fw; the nftables backend
# asserts it is empty, hence the split by backend).
{ config, lib, ... }:

let
  cfg = config.services.agentbox;
  fw = config.networking.firewall;
  # `backend` is newer than the iptables/nftables split
  # (networking.nftables.enable chose before it).
  backend = fw.backend or (if config.networking.nftables.enable then "nftables" else "iptables");
  rules = import ./firewall-rules.nix { pool = cfg.settings.network-pool or "10.213.0.0/16"; };
in
lib.mkIf (cfg.enable && cfg.openFirewall && fw.enable) (
  lib.mkMerge [
    (lib.mkIf (backend == "nftables") {
      networking.firewall.extraInputRules = rules.nftablesInput;
      networking.firewall.extraForwardRules = rules.nftablesForward;
    })
    (lib.mkIf (backend == "iptables") {
      networking.firewall.extraCommands = rules.iptables;
    })
    {
      warnings = lib.optional (backend != "nftables" && backend != "iptables") ''
        services.agentbox.openFirewall: networking.firewall.backend is "${backend}",
        for which this module writes no rules. Let the interfaces ${rules.tapPrefix}* reach
        UDP port 53 and TCP on the addresses of ${rules.pool} yourself (the daemon's
        own nftables table limits each sandbox to its ports), or the sandboxes
        get no DNS and no proxy.
      '';
    }
  ]
)
