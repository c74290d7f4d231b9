# The non-root user of the sandbox (default "agent", uid and gid 1000, home
# /home/agent). Nobody logs in: commands arrive through the agent, which runs
# them as this user (`agentbox-guest --user`) unless the host asks for uid 0.
{ config, lib, ... }:

let
  cfg = config.agentbox.guest;
  u = cfg.user;
in
lib.mkIf cfg.enable {
  users.mutableUsers = false;
  # No password and no SSH key anywhere: there is no login to lock out.
  users.allowNoPasswordLogin = true;
  users.groups.${u.name}.gid = u.uid;
  users.users.${u.name} = {
    isNormalUser = true;
    uid = u.uid;
    # The agent gives a command with a uid and no gid the gid = uid.
    group = u.name;
    home = "/home/${u.name}";
    createHome = true;
    description = "agentbox sandbox user";
  };
}
