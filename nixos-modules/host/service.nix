# The agentbox daemon as a systemd service next to libvirtd.
#
# It runs as the system user `agentbox` (group `services.agentbox.group`,
# member of libvirtd for libvirt's socket and of kvm for the KVM probe) with
# four capabilities (AmbientCapabilities below): CAP_CHOWN to give each
# sandbox's files to its QEMU's uid (docs/security.md); CAP_DAC_OVERRIDE, because
# QEMU (root under NixOS's default virtualisation.libvirtd.qemu.runAsRoot)
# creates each sandbox's agent socket as root with mode 0775, virtlogd its
# console log as root with mode 0600, and libvirtd the domain's control group
# with root's files, and the daemon must connect to the socket, read the log
# and write pids.max; CAP_NET_ADMIN and CAP_NET_BIND_SERVICE for the sandbox
# networks. Everything else is read-only or hidden from it
# (ProtectSystem=strict and the rest below); docs/nixos-host.md lists what
# each privileged call of the daemon needs.
{
  config,
  lib,
  pkgs,
  ...
}:

let
  cfg = config.services.agentbox;
  s = cfg.settings;
  toml = pkgs.formats.toml { };
  configFile = toml.generate "agentbox-config.toml" s;
  qemuImg = pkgs.qemu-utils or pkgs.qemu;
  # Paths the daemon writes besides its StateDirectory/RuntimeDirectory
  # (equal to them with the defaults); "-": no error while they do not exist.
  writable = lib.unique (
    map (p: "-${p}") [
      s.state-dir
      s.runtime-dir
      (dirOf s.socket)
    ]
  );
in
lib.mkIf cfg.enable {
  services.agentbox.settings = {
    socket = lib.mkDefault "/run/agentbox/agentbox.sock";
    state-dir = lib.mkDefault "/var/lib/agentbox";
    runtime-dir = lib.mkDefault "/run/agentbox";
    socket-group = lib.mkDefault cfg.group;
    # Each sandbox's QEMU as a uid of its own (docs/security.md).
    qemu-uid-range = lib.mkDefault "200000-265535";
  };
  # The domains' uids pass libvirt's directory to their own (master key).
  systemd.tmpfiles.rules = [ "z /var/lib/libvirt/qemu 0751 - - -" ];

  virtualisation.libvirtd.enable = true;

  # Sandbox networks (vmctl/network): taps and nf_tables, loaded here since
  # the service may not load modules (ProtectKernelModules), and IPv4
  # forwarding for policies that route (CIDR rules, open) since it may not
  # write /proc/sys (ProtectKernelTunables). Forwarding between the host's
  # other interfaces is then on too: set it to 0 to allow only name-based
  # allowlists (the daemon then refuses CIDR rules and open with the reason).
  boot.kernelModules = [
    "tun"
    "nf_tables"
  ];
  boot.kernel.sysctl."net.ipv4.ip_forward" = lib.mkDefault 1;

  users.groups.${cfg.group} = { };
  users.users.agentbox = {
    isSystemUser = true;
    group = cfg.group;
    extraGroups = [
      "libvirtd"
      "kvm"
    ];
    description = "agentbox daemon";
  };

  environment.systemPackages = [ cfg.package ];
  # The client commands on this host find the socket (and everything else)
  # in the same file the daemon reads.
  environment.etc."agentbox/config.toml".source = configFile;

  systemd.services.agentbox = {
    description = "agentbox daemon: sandbox VMs behind a REST API";
    wantedBy = lib.mkIf (!cfg.socketActivation) [ "multi-user.target" ];
    requires = [ "libvirtd.service" ] ++ lib.optional cfg.socketActivation "agentbox.socket";
    after = [
      "libvirtd.service"
      "network.target"
    ]
    ++ lib.optional cfg.socketActivation "agentbox.socket";
    # qemu-img creates the overlays.
    path = [ qemuImg ];
    serviceConfig = {
      Type = "notify";
      NotifyAccess = "main";
      ExecStart = "${cfg.package}/bin/agentbox --config ${configFile} serve";
      WatchdogSec = toString cfg.watchdogSec;
      Restart = "on-failure";
      RestartSec = "2s";
      # serve waits --shutdown-timeout (30s) for running commands on SIGTERM;
      # sandboxes keep running and the next daemon adopts them.
      TimeoutStopSec = "60s";

      User = "agentbox";
      Group = cfg.group;
      SupplementaryGroups = [
        "libvirtd"
        "kvm"
      ];
      # CAP_NET_ADMIN: sandbox taps, their addresses and the nftables rules
      # (vmctl/network); CAP_NET_BIND_SERVICE: each sandbox's egress service
      # binds ports 53, 80 and 443 on the host side of its tap.
      # CAP_CHOWN: each sandbox's directory and overlay go to its QEMU's uid
      # (--qemu-uid-range; libvirt's relabel would chown the shared image).
      AmbientCapabilities = [
        "CAP_CHOWN"
        "CAP_DAC_OVERRIDE"
        "CAP_NET_ADMIN"
        "CAP_NET_BIND_SERVICE"
      ];
      CapabilityBoundingSet = [
        "CAP_CHOWN"
        "CAP_DAC_OVERRIDE"
        "CAP_NET_ADMIN"
        "CAP_NET_BIND_SERVICE"
      ];
      NoNewPrivileges = true;

      StateDirectory = "agentbox";
      # Passable, not listable: QEMU's uids open their overlays below it.
      StateDirectoryMode = "0711";
      RuntimeDirectory = "agentbox";
      # Group members reach the socket inside; QEMU puts the agent sockets of
      # running sandboxes here, which must outlive a restart of the daemon.
      RuntimeDirectoryMode = "0750";
      RuntimeDirectoryPreserve = "yes";
      ReadWritePaths = writable;
      UMask = "0077";
      LimitNOFILE = 65536;

      ProtectSystem = "strict";
      # Read-only, not hidden: `agentbox create --image ./result` sends a path
      # under a home directory.
      ProtectHome = "read-only";
      PrivateTmp = true;
      DevicePolicy = "closed";
      DeviceAllow = [
        "/dev/kvm rw"
        "/dev/net/tun rw"
      ];
      ProtectKernelTunables = true;
      ProtectKernelModules = true;
      ProtectKernelLogs = true;
      # Writable control groups: the daemon writes pids.max (and memory.max
      # where libvirt could not apply <memtune><hard_limit>) into each
      # running domain's group, which libvirtd made under machine.slice
      # (vmctl/cgroup, vmctl/sandbox/resources), not into its own.
      # ProtectControlGroups=yes mounts /sys/fs/cgroup read-only and every
      # such limit would be recorded as not enforced; Delegate=yes would
      # only hand over this unit's own subtree, where no QEMU runs. The
      # files are root's (0644): CAP_DAC_OVERRIDE lets the daemon write them.
      ProtectControlGroups = false;
      ProtectClock = true;
      ProtectHostname = true;
      RestrictNamespaces = true;
      RestrictRealtime = true;
      RestrictSUIDSGID = true;
      LockPersonality = true;
      MemoryDenyWriteExecute = true;
      RestrictAddressFamilies = [
        "AF_UNIX"
        "AF_INET"
        "AF_INET6"
        "AF_NETLINK"
      ];
      SystemCallArchitectures = "native";
      SystemCallFilter = [ "@system-service" ];
      SystemCallErrorNumber = "EPERM";
    };
  };

  systemd.sockets.agentbox = lib.mkIf cfg.socketActivation {
    description = "agentbox API socket";
    wantedBy = [ "sockets.target" ];
    listenStreams = [ s.socket ];
    socketConfig = {
      SocketMode = "0660";
      SocketGroup = cfg.group;
    };
  };
}
