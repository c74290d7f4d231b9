{
  description = "agentbox: Linux VMs for AI agents, with sandbox images built from NixOS profiles";

  # One input: nixpkgs on a release branch, pinned in flake.lock.
  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;

      # x86_64-linux is where agentbox runs sandboxes today (vmctl/domain
      # boots x86_64 guests); aarch64-linux gets the same outputs.
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forAllSystems = f: lib.genAttrs systems (system: f nixpkgs.legacyPackages.${system});

      # The CLI reports the commit it was built from. The guest agent's
      # version is the hash of the Go source instead, so that an image only
      # changes when its inputs do, not with every commit.
      version = self.shortRev or self.dirtyShortRev or "dev";
      src = import ./nix/source.nix { inherit lib; };
      guestVersion = "src-" + builtins.substring 0 12 (builtins.unsafeDiscardStringContext (baseNameOf "${src}"));

      # Profile names: the files of profiles/ (base, python, node, build).
      profileNames = lib.attrNames self.lib.profiles;

      agentboxLib = import ./nix/lib.nix { inherit self nixpkgs; };
    in
    {
      packages = forAllSystems (pkgs: {
        agentbox = pkgs.callPackage ./nix/agentbox.nix { inherit src version; };
        agentbox-guest = pkgs.callPackage ./nix/agentbox-guest.nix {
          inherit src;
          version = guestVersion;
        };
        default = self.packages.${pkgs.stdenv.hostPlatform.system}.agentbox;
      });

      # `nix run .#agentbox -- run python -- CMD`: the CLI, told which flake
      # its profiles come from (this one, as a store path) unless the caller
      # set AGENTBOX_FLAKE.
      apps = forAllSystems (
        pkgs:
        let
          agentbox = self.packages.${pkgs.stdenv.hostPlatform.system}.agentbox;
          wrapper = pkgs.writeShellScriptBin "agentbox" ''
            export AGENTBOX_FLAKE="''${AGENTBOX_FLAKE:-${self}}"
            exec ${agentbox}/bin/agentbox "$@"
          '';
          app = {
            type = "app";
            program = "${wrapper}/bin/agentbox";
            meta.description = "agentbox CLI; profiles resolve in this flake unless AGENTBOX_FLAKE is set";
          };
        in
        {
          agentbox = app;
          default = app;
        }
      );

      # `nix build .#images.python`: one image directory per profile
      # (docs/image-format.md), the same contract as `agentbox run --image DIR`.
      # List them: nix eval --json .#legacyPackages.x86_64-linux.images --apply builtins.attrNames
      legacyPackages = forAllSystems (pkgs: {
        images = lib.genAttrs profileNames (
          name:
          self.lib.mkProfile {
            inherit (pkgs.stdenv.hostPlatform) system;
            inherit name;
            modules = [ self.lib.profiles.${name} ];
          }
        );
      });

      # Each wrapper has a `key`: the module system keeps one module per key,
      # so importing a wrapper twice (host and default, or guest next to
      # lib.mkProfile, which imports it already) is the same as once instead
      # of defining the unique option `package` twice.
      nixosModules = {
        # A NixOS configuration that is an agentbox sandbox guest.
        guest =
          { lib, pkgs, ... }:
          {
            key = "agentbox#nixosModules.guest";
            _file = toString ./flake.nix + "#nixosModules.guest";
            imports = [ ./nixos-modules/guest ];
            agentbox.guest.package =
              lib.mkDefault
                self.packages.${pkgs.stdenv.hostPlatform.system}.agentbox-guest;
          };
        # A NixOS host that runs `agentbox serve` (services.agentbox).
        host =
          { lib, pkgs, ... }:
          {
            key = "agentbox#nixosModules.host";
            _file = toString ./flake.nix + "#nixosModules.host";
            imports = [ ./nixos-modules/host ];
            services.agentbox.package =
              lib.mkDefault
                self.packages.${pkgs.stdenv.hostPlatform.system}.agentbox;
          };
        default = self.nixosModules.host;
      };

      overlays.default = final: _prev: {
        agentbox = final.callPackage ./nix/agentbox.nix { inherit src version; };
        agentbox-guest = final.callPackage ./nix/agentbox-guest.nix {
          inherit src;
          version = guestVersion;
        };
      };

      lib = agentboxLib;

      # nix flake check: the packages, every image, and on x86_64-linux the
      # NixOS VM test (needs a builder with KVM).
      checks = forAllSystems (
        pkgs:
        let
          system = pkgs.stdenv.hostPlatform.system;
        in
        {
          inherit (self.packages.${system}) agentbox agentbox-guest;
        }
        // lib.mapAttrs' (name: image: lib.nameValuePair "image-${name}" image) self.legacyPackages.${system}.images
        // lib.optionalAttrs (system == "x86_64-linux") {
          vm = import ./nix/vm-test.nix { inherit self pkgs; };
        }
      );
    };
}
