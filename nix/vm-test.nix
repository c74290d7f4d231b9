# checks.x86_64-linux.vm: a NixOS host with services.agentbox.enable boots
# the base profile's image through the daemon and runs commands in it with the
# CLI, as a member of the agentbox group. The test driver runs the host as a
# QEMU/KVM VM, so this derivation requires the builder features "kvm" and
# "nixos-test" (runNixOSTest sets requiredSystemFeatures); the sandbox inside
# the host VM runs under nested KVM where the host allows it, else under TCG
# (agentbox's --accel auto), which is why the timeouts are generous.
#
# Run: nix build -L .#checks.x86_64-linux.vm   (or: nix flake check)
{ self, pkgs }:

let
  system = pkgs.stdenv.hostPlatform.system;
  image = self.legacyPackages.${system}.images.base;
in
pkgs.testers.runNixOSTest {
  name = "agentbox-vm";

  nodes.host =
    { ... }:
    {
      imports = [ self.nixosModules.host ];
      services.agentbox.enable = true;
      virtualisation = {
        memorySize = 4096;
        cores = 2;
        diskSize = 4096;
        # The image (its closure is itself: the qcow2 holds the system).
        additionalPaths = [ image ];
      };
      users.users.alice = {
        isNormalUser = true;
        extraGroups = [ "agentbox" ];
      };
      users.users.bob.isNormalUser = true;
    };

  testScript = ''
    import json
    import shlex

    # `agentbox ARGS` as USER, with stdin at EOF (run forwards a piped stdin).
    def as_user(user, args):
        return f"su -s /bin/sh {user} -c {shlex.quote('agentbox ' + args)} </dev/null"

    image = "${image}"
    run = f"run --image {image} --boot-timeout 1500s"

    host.start()
    host.wait_for_unit("libvirtd.service")
    host.wait_for_unit("agentbox.service")
    host.succeed("test -S /run/agentbox/agentbox.sock")
    assert host.succeed("systemctl show -P User agentbox.service").strip() == "agentbox"

    with subtest("a command runs in a sandbox through the daemon; nproc is the vCPU count"):
        out = host.succeed(as_user("alice", f"{run} --cpus 2 -- sh -c 'echo hello; nproc'"), timeout=1800)
        assert out == "hello\n2\n", repr(out)

    with subtest("commands run as the profile's non-root user by default, as root on request"):
        out = host.succeed(as_user("alice", f"{run} -- sh -c 'id -un; echo $HOME'"), timeout=1800)
        assert out.split() == ["user", "/home/user"], repr(out)
        out = host.succeed(as_user("alice", f"{run} --user 0 -- id -un"), timeout=1800)
        assert out == "root\n", repr(out)

    with subtest("the command's exit code comes back"):
        status, out = host.execute(as_user("alice", f"{run} -- sh -c 'exit 7'"), timeout=1800)
        assert status == 7, f"exit status {status}, output {out!r}"

    with subtest("the host firewall (iptables backend, the default) lets the taps reach the egress service"):
        rules = host.succeed("iptables -w -S nixos-fw")
        assert "-A nixos-fw -d 10.213.0.0/16 -i abx+ -p udp -m udp --dport 53 -j nixos-fw-accept" in rules, rules
        assert "-A nixos-fw -d 10.213.0.0/16 -i abx+ -p tcp -j nixos-fw-accept" in rules, rules

    with subtest("the daemon sets pids.max in the domain's control group (writable under the unit's hardening)"):
        sid = host.succeed(as_user("alice", f"create --image {image} --boot-timeout 1500s"), timeout=1800).strip()
        info = json.loads(host.succeed(as_user("alice", f"inspect {sid}")))[0]
        pids = [e for e in info["resources"]["enforcement"] if e["limit"] == "pids"]
        assert len(pids) == 1 and pids[0]["enforcement"] == "cgroup", repr(pids)
        host.succeed(as_user("alice", f"rm -f {sid}"))

    with subtest("the daemon removed the sandboxes"):
        assert host.succeed(as_user("alice", "ls -q")).strip() == "", "sandboxes left behind"

    with subtest("users outside the agentbox group cannot use the API"):
        host.fail(as_user("bob", "ls"))
  '';
}
