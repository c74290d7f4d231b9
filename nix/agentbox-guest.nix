# agentbox-guest, the guest agent (cmd/agentbox-guest): a static binary
# (CGO_ENABLED=0) that the guest module runs as a systemd service, or that an
# initramfs runs as PID 1 with --init.
{
  lib,
  buildGoModule,
  go,
  src,
  version ? "dev",
}:

assert lib.assertMsg (lib.versionAtLeast go.version "1.25")
  "agentbox-guest needs Go >= 1.25 (the go line of go.mod); this nixpkgs has Go ${go.version}: use a nixpkgs of 25.11 or later, or buildGo125Module";

buildGoModule {
  pname = "agentbox-guest";
  inherit version src;
  vendorHash = import ./vendor-hash.nix;
  subPackages = [ "cmd/agentbox-guest" ];
  env.CGO_ENABLED = 0;
  ldflags = [
    "-s"
    "-w"
    "-X main.version=${version}"
  ];
  # Its tests run in `make test` (see agentbox.nix).
  doCheck = false;
  meta = {
    description = "agentbox guest agent: serves the host over a virtio-serial port";
    mainProgram = "agentbox-guest";
    platforms = lib.platforms.linux;
  };
}
