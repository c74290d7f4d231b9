# build: a C and Go toolchain — gcc, make, git, go, pkg-config, binutils —
# with room to build in. 2 vCPUs, 2048 MiB, 8 GiB free disk, no network.
{ lib, pkgs, ... }:
{
  imports = [ ./base.nix ];
  environment.systemPackages = [
    pkgs.gcc
    pkgs.gnumake
    pkgs.git
    pkgs.go
    pkgs.pkg-config
    pkgs.binutils
  ];
  agentbox.guest = {
    resources = {
      vcpus = lib.mkDefault 2;
      memoryMiB = lib.mkDefault 2048;
    };
    image.extraSpaceMiB = lib.mkDefault 8192;
    network.policy = lib.mkDefault "none";
  };
}
