# lib of the agentbox flake (flake output `lib`).
{ self, nixpkgs }:

let
  pinned = nixpkgs;
  inherit (pinned) lib;
in
{
  # mkProfile { system, modules, name ? "custom", nixpkgs ? <agentbox's>,
  #             specialArgs ? { } } -> derivation
  #
  # Evaluates a NixOS system of the guest module plus `modules` for `system`
  # ("x86_64-linux" or "aarch64-linux") and returns its image derivation
  # (config.system.build.agentboxImage): an image directory in the contract
  # of docs/image-format.md, manifest name "agentbox-<name>". The derivation's
  # `config` attribute is the evaluated NixOS configuration. `nixpkgs` is
  # agentbox's pinned nixpkgs unless you pass your own flake input; the guest
  # agent always comes from agentbox's packages.
  #
  # In your own flake:
  #   legacyPackages.x86_64-linux.images.mytools = agentbox.lib.mkProfile {
  #     system = "x86_64-linux";
  #     name = "mytools";
  #     modules = [ agentbox.lib.profiles.python ({ pkgs, ... }: {
  #       environment.systemPackages = [ pkgs.ripgrep ];
  #       agentbox.guest.resources.memoryMiB = 4096;
  #     }) ];
  #   };
  mkProfile =
    {
      system,
      modules,
      name ? "custom",
      nixpkgs ? pinned,
      specialArgs ? { },
    }:
    let
      nixos = nixpkgs.lib.nixosSystem {
        inherit specialArgs;
        modules = [
          self.nixosModules.guest
          {
            nixpkgs.hostPlatform = system;
            agentbox.guest.enable = true;
            agentbox.guest.image.name = nixpkgs.lib.mkDefault "agentbox-${name}";
          }
        ]
        ++ modules;
      };
    in
    nixos.config.system.build.agentboxImage;

  # The profiles of this repository as NixOS modules, to build on in
  # mkProfile: base, python, node, build.
  profiles = lib.mapAttrs' (file: _: lib.nameValuePair (lib.removeSuffix ".nix" file) (../profiles + "/${file}")) (
    lib.filterAttrs (file: type: type == "regular" && lib.hasSuffix ".nix" file) (builtins.readDir ../profiles)
  );
}
