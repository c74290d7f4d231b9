# agentbox, the CLI and daemon (cmd/agentbox). qemu-img, which it runs to
# create each sandbox's overlay, is put at the end of its PATH so that a
# `nix run` or `nix profile install` works on hosts without qemu-utils.
{
  lib,
  buildGoModule,
  go,
  makeWrapper,
  qemu,
  qemu-utils ? null,
  src,
  version ? "dev",
}:

assert lib.assertMsg (lib.versionAtLeast go.version "1.25")
  "agentbox needs Go >= 1.25 (the go line of go.mod); this nixpkgs has Go ${go.version}: use a nixpkgs of 25.11 or later, or buildGo125Module";

buildGoModule {
  pname = "agentbox";
  inherit version src;
  vendorHash = import ./vendor-hash.nix;
  subPackages = [
    "cmd/agentbox"
    "cmd/agentbox-policy" # the rule-file policy plugin (serve --policy)
  ];
  ldflags = [
    "-s"
    "-w"
    "-X main.version=${version}"
  ];
  nativeBuildInputs = [ makeWrapper ];
  # The tests need libvirt, guests booted under KVM or TCG and a test image:
  # `make test` runs them (see README.md), not the Nix build.
  doCheck = false;
  postInstall = ''
    wrapProgram $out/bin/agentbox --suffix PATH : ${
      lib.makeBinPath [ (if qemu-utils != null then qemu-utils else qemu) ]
    }
  '';
  meta = {
    description = "Run AI agents' commands in isolated, reproducible KVM/QEMU virtual machines";
    mainProgram = "agentbox";
    platforms = lib.platforms.linux;
  };
}
