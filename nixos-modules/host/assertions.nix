# Checks of the agentbox host configuration; each message says what to fix.
{ config, lib, ... }:

let
  cfg = config.services.agentbox;
  s = cfg.settings;
  absolute = p: builtins.isString p && lib.hasPrefix "/" p;
  # The longest socket of a sandbox is <runtime-dir>/<12 hex>.qga.sock
  # (vmctl/sandbox); unix socket paths hold at most 107 bytes
  # (vmctl/domain.MaxUnixSocketPath).
  maxRuntimeDir = 107 - 22;
in
lib.mkIf cfg.enable {
  assertions = [
    {
      assertion = cfg.package != null;
      message = ''
        services.agentbox.package is not set. Import the module as
        `agentbox.nixosModules.host` (it sets the package), or set
        `services.agentbox.package = agentbox.packages.''${system}.agentbox;`.
      '';
    }
    {
      assertion = config.virtualisation.libvirtd.qemu.runAsRoot;
      message = ''
        services.agentbox needs virtualisation.libvirtd.qemu.runAsRoot = true (the
        NixOS default): agentbox keeps each sandbox's overlay in a directory of
        mode 0700 that QEMU running as qemu-libvirtd cannot enter. Remove
        `virtualisation.libvirtd.qemu.runAsRoot = false;`.
      '';
    }
    {
      assertion = !(s ? config);
      message = ''
        services.agentbox.settings.config: `config` is not a settings key (the
        module passes the generated file with --config); remove it.
      '';
    }
  ]
  ++ map
    (key: {
      assertion = absolute (s.${key} or null);
      message = ''
        services.agentbox.settings.${key} = ${builtins.toJSON (s.${key} or null)} must be an
        absolute path (e.g. the default ${
          {
            socket = "/run/agentbox/agentbox.sock";
            state-dir = "/var/lib/agentbox";
            runtime-dir = "/run/agentbox";
          }
          .${key}
        }).
      '';
    })
    [
      "socket"
      "state-dir"
      "runtime-dir"
    ]
  ++ [
    {
      # It goes into the host firewall's rules (./firewall-rules.nix) as
      # text; the daemon checks the rest (a valid IPv4 prefix) at start.
      assertion = builtins.match "[0-9]{1,3}(\\.[0-9]{1,3}){3}/[0-9]{1,2}" (toString (s.network-pool or "10.213.0.0/16")) != null;
      message = ''
        services.agentbox.settings.network-pool = ${builtins.toJSON (s.network-pool or null)} is not
        an IPv4 CIDR such as "10.213.0.0/16".
      '';
    }
    {
      assertion = builtins.stringLength (toString (s.runtime-dir or "")) <= maxRuntimeDir;
      message = ''
        services.agentbox.settings.runtime-dir is longer than ${toString maxRuntimeDir}
        bytes: the agent sockets inside it would not fit a unix socket path; use a
        short directory such as /run/agentbox.
      '';
    }
  ];
}
