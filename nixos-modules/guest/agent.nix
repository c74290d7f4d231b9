# The guest agent as a systemd service bound to its virtio-serial port, the
# PATH its commands see, and the host name agentbox gives the sandbox.
{
  config,
  lib,
  pkgs,
  utils,
  ...
}:

let
  cfg = config.agentbox.guest;
  port = cfg.agent.port;
  # udev links the port to /dev/virtio-ports/<port> (50-udev-default.rules);
  # the device unit is dev-virtio\x2dports-<port>.device.
  portDevice = "/dev/virtio-ports/${port}";
  portUnit = "${utils.escapeSystemdPath portDevice}.device";
in
lib.mkIf cfg.enable {
  # Start the agent as soon as udev sees the port, like qemu-guest-agent.
  services.udev.extraRules = ''
    SUBSYSTEM=="virtio-ports", ATTR{name}=="${port}", TAG+="systemd", ENV{SYSTEMD_WANTS}+="agentbox-guest.service"
  '';

  boot.kernelModules = [ "virtio_console" ];

  systemd.services.agentbox-guest = {
    description = "agentbox guest agent on virtio-serial port ${port}";
    wantedBy = [ "multi-user.target" ];
    bindsTo = [ portUnit ];
    after = [
      portUnit
      "systemd-tmpfiles-setup.service"
    ];
    # Restart without a rate limit: a sandbox without its agent is useless.
    unitConfig.StartLimitIntervalSec = 0;
    serviceConfig = {
      ExecStart = utils.escapeSystemdExecArgs (
        [
          "${cfg.package}/bin/agentbox-guest"
          "--port"
          port
          # Commands run as the sandbox user unless the host asks for
          # another uid, with the system profile on their PATH.
          "--user"
          cfg.user.name
          "--path"
          "/run/wrappers/bin:/run/current-system/sw/bin:/run/current-system/sw/sbin"
        ]
        ++ cfg.agent.extraArgs
      );
      Restart = "always";
      RestartSec = "100ms";
      # The agent sets its own oom_score_adj to -1000 and each command's to 0
      # (vmctl/guestagent); systemd must not give the commands -1000.
      # Commands inherit these limits: no task limit, many open files.
      TasksMax = "infinity";
      LimitNOFILE = "1048576";
      LimitNPROC = "infinity";
      LimitCORE = "0";
      # "agentbox-guest: ready on /dev/vportNpM" goes to the serial console,
      # which agentbox keeps as the sandbox's console log.
      StandardOutput = "journal+console";
      StandardError = "journal+console";
    };
  };

  # The agent's own default PATH (vmctl/agentproto.DefaultPath) is the FHS
  # one; --path above gives commands the system profile. These links keep
  # FHS-minded scripts (#!/usr/local/bin/...) working too.
  systemd.tmpfiles.rules = [
    "d /usr/local 0755 root root -"
    "L+ /usr/local/bin - - - - /run/current-system/sw/bin"
    "L+ /usr/local/sbin - - - - /run/current-system/sw/sbin"
  ];

  systemd.services.agentbox-hostname = lib.mkIf cfg.hostnameFromCmdline {
    description = "Host name from agentbox.hostname= on the kernel command line";
    wantedBy = [ "sysinit.target" ];
    before = [
      "sysinit.target"
      "agentbox-guest.service"
    ];
    unitConfig.DefaultDependencies = false;
    serviceConfig = {
      Type = "oneshot";
      RemainAfterExit = true;
    };
    script = ''
      for arg in $(cat /proc/cmdline); do
        case "$arg" in
        agentbox.hostname=?*) printf '%s' "''${arg#agentbox.hostname=}" >/proc/sys/kernel/hostname ;;
        esac
      done
    '';
  };
}
