# The image derivation of one profile: a directory in the image contract of
# docs/image-format.md (manifest.toml, vmlinuz, initrd.img, rootfs.qcow2),
# built by ./make-image.sh from the NixOS system closure without a VM.
#
# Called by nixos-modules/guest/image.nix as system.build.agentboxImage; the
# arguments below come from agentbox.guest.* and the NixOS configuration.
{
  lib,
  stdenvNoCC,
  closureInfo,
  e2fsprogs,
  qemu,
  qemu-utils ? null,
}:

{
  # Manifest `name` and the derivation's name, e.g. "agentbox-python".
  name,
  # config.system.build.toplevel: its closure is the root file system.
  toplevel,
  # Kernel and initrd files (config.system.build.kernel/<kernelFile>, ...).
  kernel,
  initrd,
  # Full kernel command line of the manifest (starts with init=<toplevel>/init).
  cmdline,
  kernelVersion,
  agentPort,
  # Default resources: vCPU count and memory in MiB.
  vcpus,
  memoryMiB,
  # Default network policy of sandboxes from this image (manifest [network]):
  # policy "none" | "allowlist" | "open", allow a list of DEST strings.
  networkPolicy ? "none",
  networkAllow ? [ ],
  # Free space of the root file system beyond the closure, in MiB.
  extraSpaceMiB,
  fsUUID,
  fsHashSeed,
  fsLabel,
  # Seconds since 1970; every time in the file system is this or 1.
  sourceDateEpoch,
  passthru ? { },
}:

let
  # qemu-utils (qemu built with toolsOnly) has qemu-img without the emulators.
  qemuImg = if qemu-utils != null then qemu-utils else qemu;
  closure = closureInfo { rootPaths = [ toplevel ]; };
in
stdenvNoCC.mkDerivation {
  name = name;
  # The qcow2 holds the whole closure as bytes, so Nix would find every store
  # path in it and keep the closure alive next to the image. The image is
  # self-contained: it references nothing on the host.
  __structuredAttrs = true;
  unsafeDiscardReferences.out = true;

  nativeBuildInputs = [
    e2fsprogs
    qemuImg
  ];

  env = {
    closureInfo = "${closure}";
    kernel = "${kernel}";
    initrd = "${initrd}";
    imageName = name;
    inherit cmdline kernelVersion agentPort fsUUID fsHashSeed fsLabel;
    vcpus = toString vcpus;
    memoryMiB = toString memoryMiB;
    inherit networkPolicy;
    networkAllow = lib.concatStringsSep "\n" networkAllow;
    extraSpaceMiB = toString extraSpaceMiB;
    SOURCE_DATE_EPOCH = toString sourceDateEpoch;
    mke2fsConf = "${./mke2fs.conf}";
  };

  buildCommand = ''
    bash ${./make-image.sh} "$out"
  '';

  inherit passthru;

  meta = {
    description = "agentbox image ${name} (manifest.toml, vmlinuz, initrd.img, rootfs.qcow2)";
    platforms = lib.platforms.linux;
  };
}
