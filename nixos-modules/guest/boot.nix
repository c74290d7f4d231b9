# Boot trimmed for a sandbox: agentbox boots the image's kernel and initrd
# directly (no bootloader), the root file system is the image on /dev/vda
# (a per-sandbox qcow2 overlay), the serial port is the console and the only
# getty, and nothing runs that a short-lived sandbox does not need: no
# nix-daemon, no documentation, no time sync (the agent sets the clock), no
# emergency shell that would wait forever for a human.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  cfg = config.agentbox.guest;
  inherit (lib) mkDefault;
  platform = pkgs.stdenv.hostPlatform;
  # The first serial port: the console agentbox logs (console=ttyS0 on x86).
  serial = if platform.isAarch64 then "ttyAMA0" else "ttyS0";
in
lib.mkIf cfg.enable {
  boot.loader.grub.enable = mkDefault false;
  # Scripted stage 1: boot.panic_on_fail turns a failed mount into a panic,
  # and panic=-1 into a stop that agentbox reports with the console's tail.
  boot.initrd.systemd.enable = mkDefault false;
  boot.initrd.kernelModules = [
    "virtio_pci"
    "virtio_blk"
  ];
  boot.initrd.checkJournalingFS = false;
  boot.initrd.verbose = false;
  boot.kernelParams = [
    "console=${serial}"
    "panic=-1"
    "boot.panic_on_fail"
    "quiet"
  ]
  # Keep the TSC as clocksource on a loaded host, and skip the IO-APIC timer
  # check a starved vCPU can fail with a panic (see tests/image/build.sh).
  ++ lib.optionals platform.isx86 [ "tsc=reliable" "no_timer_check" ];

  fileSystems."/" = {
    device = "/dev/vda";
    fsType = "ext4";
    options = [ "noatime" ];
    noCheck = true;
  };
  swapDevices = mkDefault [ ];
  systemd.enableEmergencyMode = false;

  # Only the serial console gets a getty (systemd-getty-generator starts
  # serial-getty@<serial> for console=); no virtual terminals.
  systemd.services."getty@".enable = false;
  systemd.services."autovt@".enable = false;

  # No Nix inside the sandbox: no daemon, no channel, no installer tools.
  nix.enable = mkDefault false;
  nix.channel.enable = mkDefault false;
  system.disableInstallerTools = mkDefault true;
  system.switch.enable = mkDefault false;

  # What nixos/modules/profiles/minimal.nix does, only for agentbox guests.
  documentation = {
    enable = mkDefault false;
    doc.enable = mkDefault false;
    info.enable = mkDefault false;
    man.enable = mkDefault false;
    nixos.enable = mkDefault false;
  };
  environment.defaultPackages = mkDefault [ ];
  environment.stub-ld.enable = mkDefault false;
  programs.command-not-found.enable = mkDefault false;
  services.logrotate.enable = mkDefault false;
  services.udisks2.enable = mkDefault false;
  xdg.autostart.enable = mkDefault false;
  xdg.icons.enable = mkDefault false;
  xdg.mime.enable = mkDefault false;
  xdg.sounds.enable = mkDefault false;
  fonts.fontconfig.enable = mkDefault false;

  boot.enableContainers = mkDefault false;
  services.lvm.enable = mkDefault false;
  security.sudo.enable = mkDefault false;
  services.timesyncd.enable = mkDefault false;
  systemd.oomd.enable = mkDefault false;
  # In memory (/run/log/journal): the root disk is the sandbox's overlay.
  # Storage through its typed option (nixpkgs
  # nixos/modules/system/boot/systemd/journald.nix writes Storage= itself;
  # a second Storage= line in extraConfig only won by coming last).
  services.journald.storage = mkDefault "volatile";
  services.journald.extraConfig = ''
    RuntimeMaxUse=32M
  '';

  networking.hostName = mkDefault "agentbox";
  system.stateVersion = mkDefault "25.11";
}
