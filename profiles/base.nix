# base: the smallest sandbox — NixOS's core tools (bash, coreutils, findutils,
# grep, sed, gzip, tar, procps, util-linux…), about what a busybox system has.
# 1 vCPU, 512 MiB, no network. The sandbox user is `user` (uid 1000, home
# /home/user, bash), the account E2B's SDK runs commands as.
#
# The other profiles import it. Its values have priority 1200: profiles
# override them with lib.mkDefault (1000), and your own modules with plain
# definitions (100) override both.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  profileDefault = lib.mkOverride 1200;
in
{
  agentbox.guest = {
    enable = true;
    user.name = profileDefault "user";
    resources = {
      vcpus = profileDefault 1;
      memoryMiB = profileDefault 512;
    };
    network.policy = profileDefault "none";
  };
  users.users.${config.agentbox.guest.user.name}.shell = profileDefault pkgs.bashInteractive;
}
