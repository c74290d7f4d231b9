# Checks of an agentbox guest configuration; each message says what to fix.
{ config, lib, ... }:

let
  cfg = config.agentbox.guest;
  inherit (cfg) user network resources;
  root = config.fileSystems."/" or null;
in
lib.mkIf cfg.enable {
  assertions = [
    {
      assertion = cfg.package != null;
      message = ''
        agentbox guest: agentbox.guest.package is not set. Import the module as
        `agentbox.nixosModules.guest` (it sets the package), or set
        `agentbox.guest.package = agentbox.packages.''${system}.agentbox-guest;`.
      '';
    }
    {
      # The rule of vmctl/image for the manifest's agent_port.
      assertion = builtins.match "[A-Za-z0-9][A-Za-z0-9._-]{0,62}" cfg.agent.port != null;
      message = ''
        agentbox guest: agentbox.guest.agent.port = "${cfg.agent.port}" is not a
        port name agentbox accepts: 1 to 63 letters, digits, '.', '_' or '-',
        starting with a letter or digit (default "org.agentbox.agent.0").
      '';
    }
    {
      assertion = resources.memoryMiB >= 256;
      message = ''
        agentbox guest: agentbox.guest.resources.memoryMiB = ${toString resources.memoryMiB}
        is too small for NixOS with systemd to boot: use 256 MiB or more
        (default 512).
      '';
    }
    {
      assertion = network.policy == "allowlist" -> network.allow != [ ];
      message = ''
        agentbox guest: agentbox.guest.network.policy = "allowlist" with an empty
        agentbox.guest.network.allow reaches nothing: list destinations
        (NAME, NAME:PORT, CIDR:PORT, host:PORT) or use policy "none".
      '';
    }
    {
      assertion = network.allow != [ ] -> network.policy == "allowlist";
      message = ''
        agentbox guest: agentbox.guest.network.allow is set but network.policy is
        "${network.policy}": set agentbox.guest.network.policy = "allowlist",
        or remove the allow list.
      '';
    }
    {
      assertion = !config.boot.loader.grub.enable;
      message = ''
        agentbox guest: boot.loader.grub.enable is true, but agentbox boots the
        image's kernel and initrd directly and never runs a bootloader: remove
        `boot.loader.grub.enable = true;` from the profile.
      '';
    }
    {
      assertion = root != null && root.device == "/dev/vda" && root.fsType == "ext4";
      message = ''
        agentbox guest: fileSystems."/" must be the ext4 image on /dev/vda (the
        guest module sets it); the profile overrides it with
        ${if root == null then "nothing" else "${toString root.device} (${root.fsType})"}:
        remove that fileSystems."/" definition.
      '';
    }
    {
      assertion = !(config.users.users ? ${user.name}) || config.users.users.${user.name}.uid == user.uid;
      message = ''
        agentbox guest: users.users.${user.name}.uid differs from
        agentbox.guest.user.uid = ${toString user.uid}: set the uid through
        agentbox.guest.user.uid only.
      '';
    }
  ];

  warnings =
    lib.optional config.nix.enable ''
      agentbox guest: nix.enable = true. The image has no Nix database for its
      store paths, so nix inside the sandbox cannot use them; leave nix.enable
      false unless you know you need it.
    '';
}
