# system.build.agentboxImage: the image directory of this configuration
# (docs/image-format.md), built by nix/make-image.nix from the system
# closure, the NixOS kernel and initrd, and the options of agentbox.guest.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  cfg = config.agentbox.guest;
  toplevel = config.system.build.toplevel;
  cmdline = lib.concatStringsSep " " (
    [
      "init=${toplevel}/init"
      "root=/dev/vda"
      "rw"
    ]
    ++ config.boot.kernelParams
  );
  makeImage = import ../../nix/make-image.nix {
    inherit (pkgs)
      lib
      stdenvNoCC
      closureInfo
      e2fsprogs
      qemu
      ;
    qemu-utils = pkgs.qemu-utils or null;
  };
in
lib.mkIf cfg.enable {
  agentbox.guest.image.cmdline = cmdline;

  system.build.agentboxImage = makeImage {
    inherit (cfg.image) name extraSpaceMiB sourceDateEpoch;
    inherit toplevel cmdline;
    kernel = "${config.system.build.kernel}/${config.system.boot.loader.kernelFile}";
    initrd = "${config.system.build.initialRamdisk}/${config.system.boot.loader.initrdFile}";
    kernelVersion = config.boot.kernelPackages.kernel.modDirVersion;
    agentPort = cfg.agent.port;
    inherit (cfg.resources) vcpus memoryMiB;
    networkPolicy = cfg.network.policy;
    networkAllow = cfg.network.allow;
    fsUUID = cfg.image.fsUUID;
    fsHashSeed = cfg.image.hashSeed;
    fsLabel = cfg.image.label;
    # `nix eval .#images.python.config.agentbox.guest.network.policy`
    passthru = { inherit config; };
  };
}
