# Options of an agentbox guest: a NixOS configuration that boots as an
# agentbox sandbox (direct kernel boot, the guest agent on virtio-serial) and
# builds into an image directory, system.build.agentboxImage.
{ lib, ... }:

let
  inherit (lib) mkOption mkEnableOption types;
in
{
  options.agentbox.guest = {
    enable = mkEnableOption ''
      this NixOS configuration as an agentbox sandbox guest: the guest agent as
      a systemd service on its virtio-serial port, a boot trimmed for direct
      kernel boot (no bootloader, no nix-daemon, docs off), the non-root user
      of `agentbox.guest.user`, and the image derivation
      `config.system.build.agentboxImage` (docs/image-format.md)'';

    package = mkOption {
      type = types.nullOr types.package;
      default = null;
      defaultText = lib.literalMD "`agentbox.packages.<system>.agentbox-guest` when imported through the agentbox flake's `nixosModules.guest`, else unset";
      description = ''
        The agentbox-guest package (static binary `bin/agentbox-guest`). The
        flake's `nixosModules.guest` sets it; set it yourself when you import
        `nixos-modules/guest` by path.
      '';
    };

    agent = {
      port = mkOption {
        type = types.str;
        default = "org.agentbox.agent.0";
        description = ''
          Name of the virtio-serial port the agent serves (the domain's
          `<channel><target name=...>`), written to the manifest as
          `agent_port`. The agent waits for `/dev/virtio-ports/<port>`, which
          udev creates; the service is started when that device appears.
        '';
      };

      extraArgs = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [ "--some-future-flag" ];
        description = ''
          Extra command-line arguments of `agentbox-guest` (after `--port`).
          Default: none.
        '';
      };
    };

    user = {
      name = mkOption {
        type = types.str;
        default = "agent";
        description = ''
          Name of the non-root user sandbox commands run as by default (the
          agent's `--user`), with home `/home/<name>` and a primary group of
          the same name and number. Files the host uploads and directories it
          makes belong to this user. A command runs as root only when the host
          asks for uid 0 (`agentbox exec --user 0 ...`).
        '';
      };

      uid = mkOption {
        type = types.ints.between 1000 60000;
        default = 1000;
        description = ''
          uid (and gid of its primary group) of `agentbox.guest.user.name`.
          The host may still pick another user per command: `agentbox run
          --user UID ...` (ExecRequest.UID; with no GID the agent uses the uid
          as the gid).
        '';
      };
    };

    resources = {
      vcpus = mkOption {
        type = types.ints.between 1 255;
        default = 1;
        description = ''
          Default number of vCPUs of a sandbox of this image (manifest
          `[resources] vcpus`; `agentbox run --cpus N` overrides it). The guest
          sees exactly this many CPUs: `nproc` prints it (no CPU affinity or
          cgroup limit is set inside the guest).
        '';
      };

      memoryMiB = mkOption {
        type = types.ints.positive;
        default = 512;
        description = ''
          Default guest memory in MiB (manifest `[resources] memory_mib`;
          `agentbox run --memory MiB` overrides it). NixOS with systemd needs at
          least 256 MiB.
        '';
      };
    };

    network = {
      policy = mkOption {
        type = types.enum [
          "none"
          "allowlist"
          "open"
        ];
        default = "none";
        description = ''
          Network policy this profile asks for. `none` (default): the guest
          has no network device and runs no network service. `allowlist`:
          egress only to `agentbox.guest.network.allow`. `open`: NAT to the
          outside, never to the host's services. It is written into the
          image's manifest as the default policy of sandboxes made from it;
          a create request that names a policy (`--network`) replaces it.
          With anything but `none` the host gives the sandbox one virtio NIC
          and its address on the kernel command line (`agentbox.net=`), which
          the guest agent configures; enforcement is on the host.
        '';
      };

      allow = mkOption {
        type = types.listOf types.str;
        default = [ ];
        example = [
          "api.example.com"
          "downloads.example.com:443"
          "10.0.0.0/8:5432"
        ];
        description = ''
          Destinations of the `allowlist` policy: `NAME`, `NAME:PORT`,
          `CIDR:PORT` or `host:PORT`. Default: empty.
        '';
      };
    };

    hostnameFromCmdline = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Set the kernel host name from `agentbox.hostname=` on the kernel
        command line (agentbox appends it: the domain name of the sandbox).
      '';
    };

    image = {
      name = mkOption {
        type = types.strMatching "[A-Za-z0-9][A-Za-z0-9._+-]*";
        default = "agentbox";
        example = "agentbox-python";
        description = ''
          Manifest `name` of the image and name of its derivation.
          `lib.mkProfile` sets it to `agentbox-<profile>`.
        '';
      };

      extraSpaceMiB = mkOption {
        type = types.ints.unsigned;
        default = 2048;
        description = ''
          Free space in MiB that the root file system has beyond the system
          closure: what a sandbox can write (its writes go to a per-sandbox
          qcow2 overlay; unused space costs nothing on the host, the qcow2 is
          sparse).
        '';
      };

      fsUUID = mkOption {
        type = types.strMatching "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
        default = "6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0101";
        description = "UUID of the root ext4 file system, fixed so that the image is reproducible.";
      };

      hashSeed = mkOption {
        type = types.strMatching "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
        default = "6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0102";
        description = ''
          ext4 directory hash seed (a UUID), fixed so that the image is
          reproducible (mke2fs picks a random one otherwise).
        '';
      };

      label = mkOption {
        type = types.strMatching "[A-Za-z0-9._-]{1,16}";
        default = "agentbox-root";
        description = "Label of the root ext4 file system (at most 16 characters).";
      };

      sourceDateEpoch = mkOption {
        type = types.ints.unsigned;
        default = 1704067200;
        description = ''
          Seconds since 1970 (default 2024-01-01T00:00:00Z) used for every
          time stamp the file system build sets (superblock, inode change and
          creation times); file modification times are 1, as in /nix/store.
        '';
      };

      cmdline = mkOption {
        type = types.str;
        readOnly = true;
        description = ''
          Kernel command line written to the manifest:
          `init=<toplevel>/init root=/dev/vda rw` and `boot.kernelParams`.
          agentbox appends `agentbox.port=` and `agentbox.hostname=`.
        '';
      };
    };
  };
}
