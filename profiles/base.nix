# base: the smallest sandbox — NixOS's core tools (bash, coreutils, findutils,
# grep, sed, gzip, tar, procps, util-linux…), about what a busybox system has.
# 1 vCPU, 512 MiB, no network.
#
# The other profiles import it. Its values have priority 1200: profiles
# override them with lib.mkDefault (1000), and your own modules with plain
# definitions (100) override both.
{ lib, ... }:
let
  profileDefault = lib.mkOverride 1200;
in
{
  agentbox.guest = {
    enable = true;
    resources = {
      vcpus = profileDefault 1;
      memoryMiB = profileDefault 512;
    };
    network.policy = profileDefault "none";
  };
}
