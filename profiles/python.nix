# python: Python 3 with common data libraries (numpy, pandas, scipy,
# matplotlib, pyyaml). 2 vCPUs, 2048 MiB, no network.
{ lib, pkgs, ... }:
{
  imports = [ ./base.nix ];
  environment.systemPackages = [
    (pkgs.python3.withPackages (ps: [
      ps.numpy
      ps.pandas
      ps.scipy
      ps.matplotlib
      ps.pyyaml
    ]))
  ];
  agentbox.guest = {
    resources = {
      vcpus = lib.mkDefault 2;
      memoryMiB = lib.mkDefault 2048;
    };
    network.policy = lib.mkDefault "none";
  };
}
