# Options of the agentbox host service: `agentbox serve` next to libvirtd.
{ lib, pkgs, ... }:

let
  inherit (lib) mkOption mkEnableOption types;
  toml = pkgs.formats.toml { };
in
{
  options.services.agentbox = {
    enable = mkEnableOption ''
      the agentbox daemon (`agentbox serve`): a REST API on a unix socket that
      boots sandboxes through libvirtd, which this also enables. Members of the
      group `services.agentbox.group` may use the API (and the `agentbox`
      client commands)'';

    package = mkOption {
      type = types.nullOr types.package;
      default = null;
      defaultText = lib.literalMD "`agentbox.packages.<system>.agentbox` when imported through the agentbox flake's `nixosModules.host`, else unset";
      description = ''
        The agentbox package (`bin/agentbox`). The flake's `nixosModules.host`
        (and `nixosModules.default`) sets it; set it yourself when you import
        `nixos-modules/host` by path.
      '';
    };

    settings = mkOption {
      type = toml.type;
      default = { };
      example = lib.literalExpression ''
        {
          capacity-memory = 16384;     # MiB all sandboxes may use together
          capacity-vcpus = 32;
          default-ttl = "4h";
          default-idle-timeout = "30m";
          audit-max-bytes = 268435456; # bytes
        }
      '';
      description = ''
        Configuration of agentbox, written as TOML to
        /etc/agentbox/config.toml and passed to the daemon with `--config`.
        Keys are the long flag names of `agentbox --help` and
        `agentbox serve --help` (units as there: memory in MiB, durations
        like "30s" or "4h", sizes in bytes); a key no command knows is an
        error at start. The client commands on this host read the same file.
        Defaults set here (override any of them): socket =
        "/run/agentbox/agentbox.sock", state-dir = "/var/lib/agentbox",
        runtime-dir = "/run/agentbox", socket-group = the value of
        `services.agentbox.group`.
      '';
    };

    group = mkOption {
      type = types.str;
      default = "agentbox";
      description = ''
        Group whose members may use the API socket (mode 0660). The daemon's
        own user, `agentbox`, has this as its primary group.
      '';
    };

    socketActivation = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Let systemd own the API socket (agentbox.socket, mode 0660, group
        `services.agentbox.group`) and start the daemon on the first
        connection. Default: the daemon starts at boot and listens itself.
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Let the sandboxes through NixOS's firewall (`networking.firewall`,
        iptables or nftables backend) to the daemon's egress service on the
        host side of their taps (`abx*`): UDP port 53 and TCP to the addresses
        of `settings.network-pool` (default 10.213.0.0/16), and with
        `networking.firewall.filterForward` what the daemon forwards for them.
        Which TCP ports each sandbox reaches (53, 80/443, the ports of its
        `name:PORT` and `host:PORT` rules) is enforced by the daemon's own
        nftables table, which drops everything else from its taps first.
        Without these rules the firewall drops the guests' DNS and proxy
        traffic. Turn it off only to write equivalent rules yourself.
      '';
    };

    watchdogSec = mkOption {
      type = types.ints.unsigned;
      default = 60;
      description = ''
        systemd watchdog interval in seconds (WatchdogSec=): the daemon pings
        at half of it while it answers, and systemd restarts it after a
        missed interval. 0 turns the watchdog off.
      '';
    };
  };
}
