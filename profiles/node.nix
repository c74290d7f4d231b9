# node: Node.js (the nixpkgs LTS, with npm). 2 vCPUs, 1024 MiB, no network.
{ lib, pkgs, ... }:
{
  imports = [ ./base.nix ];
  environment.systemPackages = [ pkgs.nodejs ];
  agentbox.guest = {
    resources = {
      vcpus = lib.mkDefault 2;
      memoryMiB = lib.mkDefault 1024;
    };
    network.policy = lib.mkDefault "none";
  };
}
