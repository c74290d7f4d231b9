#!/usr/bin/env bash
# CI checks of the Nix side that need no nixpkgs (`make nix-check`; `make
# test` runs it before the Go tests). Needs Debian's nix-bin, go, e2fsprogs
# and qemu-utils (tests/host-setup.sh installs them). Under a minute.
#
#   1. every .nix file parses (nix-instantiate --parse)
#   2. flake.lock is a version-7 lock with nixpkgs pinned as flake.nix asks,
#      flake.nix takes exactly { self, nixpkgs }, the modules, profiles and
#      nix/ files import to what their callers expect, and the flake's
#      nixosModules carry their keys (host and default one key, so importing
#      both, or one twice, is importing it once)
#   3. nix/vendor-hash.nix matches `go mod vendor` (check-vendor-hash.sh)
#   4. qemu-img convert writes the same qcow2 twice from one raw file
#   5. the image builder nix/make-image.sh is byte-for-byte reproducible and
#      its output is a valid image (go test ./tests/nix: mke2fs -d, debugfs,
#      qemu-img with the builder's exact options, on a fake closure); the
#      host module's firewall rules, loaded with NixOS's firewall as both
#      backends render it into network namespaces, let a tap reach the
#      egress ports and nothing else (needs root, nft, iptables, ip)
#
# What needs nixpkgs (nix flake check, the images, the NixOS VM test) runs on
# a host with Nix and KVM: see docs/nix.md.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$repo"

die() {
	echo "nix-check: FAIL: $*" >&2
	exit 1
}
step() { echo "nix-check: $*" >&2; }
for t in nix nix-instantiate go qemu-img mke2fs debugfs nft iptables ip; do
	command -v "$t" >/dev/null || die "$t not found: run tests/host-setup.sh (installs nix-bin, e2fsprogs, qemu-utils, nftables, iptables, iproute2)"
done
nixopts=()
# As root without Nix's build users (Debian's nix-bin on a CI machine).
if [ "$(id -u)" = 0 ] && ! getent group nixbld >/dev/null; then
	nixopts+=(--option build-users-group '')
fi

# ----------------------------------------------------------------- 1. parse
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	mapfile -t nixfiles < <(git ls-files -co --exclude-standard -- '*.nix')
else
	mapfile -t nixfiles < <(find . -name '*.nix' -not -path './.git/*' | sed 's|^\./||')
fi
[ "${#nixfiles[@]}" -gt 0 ] || die "no .nix files found"
bad=0
for f in "${nixfiles[@]}"; do
	[ -f "$f" ] || continue # deleted but still tracked
	if ! out=$(nix-instantiate "${nixopts[@]}" --parse "$f" 2>&1 >/dev/null); then
		echo "$out" >&2
		bad=$((bad + 1))
	fi
done
[ "$bad" = 0 ] || die "$bad .nix file(s) do not parse (above)"
step "1. ${#nixfiles[@]} .nix files parse"

# ------------------------------------------------- 2. lock, flake, modules
# Evaluated with builtins only; what the expression returns must equal
# $want byte for byte (nix prints attribute names sorted).
got=$(nix-instantiate "${nixopts[@]}" --eval --strict --json -E '
  let
    root = '"$repo"';
    lock = builtins.fromJSON (builtins.readFile (root + "/flake.lock"));
    flake = import (root + "/flake.nix");
    np = lock.nodes.nixpkgs;
    kind = f: builtins.typeOf (import (root + "/${f}"));
    dir = d: builtins.attrNames (builtins.readDir (root + "/${d}"));
    importsExist = d: builtins.all builtins.pathExists (import (root + "/${d}")).imports;
  in {
    lockVersion = lock.version;
    lockRoot = lock.nodes.${lock.root}.inputs;
    locked = np.locked;
    original = np.original;
    inputUrl = flake.inputs.nixpkgs.url;
    outputArgs = builtins.functionArgs flake.outputs;
    profiles = dir "profiles";
    profileKinds = map (p: kind "profiles/${p}") (dir "profiles");
    guestImports = importsExist "nixos-modules/guest";
    hostImports = importsExist "nixos-modules/host";
    vendorHash = import (root + "/nix/vendor-hash.nix");
    nixFiles = map kind [ "nix/lib.nix" "nix/make-image.nix" "nix/agentbox.nix" "nix/agentbox-guest.nix" "nix/source.nix" "nix/vm-test.nix" ];
    # The outputs of the flake with a stub nixpkgs: only nixosModules is forced,
    # and each wrapper is called with the arguments it asks for.
    moduleKeys =
      let
        self = flake.outputs { inherit self; nixpkgs = { lib = { }; }; };
        call = m: m { lib = { mkDefault = v: v; }; pkgs = { }; };
        mods = builtins.mapAttrs (_: call) self.nixosModules;
      in {
        keys = builtins.mapAttrs (_: m: m.key) mods;
        imports = builtins.mapAttrs (_: m: map (p: builtins.baseNameOf (toString p)) m.imports) mods;
        # What the module system does with the keys (lib/modules.nix
        # collects modules with builtins.genericClosure by key).
        once = builtins.length (builtins.genericClosure {
          startSet = map (n: { key = mods.${n}.key; }) [ "host" "default" "host" ];
          operator = _: [ ];
        });
      };
  }') || die "evaluating flake.lock, flake.nix and the modules failed (above)"
vendor=$(grep -o 'sha256-[A-Za-z0-9+/=]*' nix/vendor-hash.nix | head -n1)
want='{"guestImports":true,"hostImports":true,"inputUrl":"github:NixOS/nixpkgs/nixos-25.11","lockRoot":{"nixpkgs":"nixpkgs"},"lockVersion":7,"locked":{"lastModified":1776734388,"narHash":"sha256-vl3dkhlE5gzsItuHoEMVe+DlonsK+0836LIRDnm6MXQ=","owner":"NixOS","repo":"nixpkgs","rev":"10e7ad5bbcb421fe07e3a4ad53a634b0cd57ffac","type":"github"},"moduleKeys":{"imports":{"default":["host"],"guest":["guest"],"host":["host"]},"keys":{"default":"agentbox#nixosModules.host","guest":"agentbox#nixosModules.guest","host":"agentbox#nixosModules.host"},"once":1},"nixFiles":["lambda","lambda","lambda","lambda","lambda","lambda"],"original":{"owner":"NixOS","ref":"nixos-25.11","repo":"nixpkgs","type":"github"},"outputArgs":{"nixpkgs":false,"self":false},"profileKinds":["lambda","lambda","lambda","lambda"],"profiles":["base.nix","build.nix","node.nix","python.nix"],"vendorHash":"'"$vendor"'"}'
if [ "$got" != "$want" ]; then
	echo "got:  $got" >&2
	echo "want: $want" >&2
	die "flake.lock / flake.nix / modules are not what the flake expects (got vs want above)"
fi
step "2. flake.lock pins nixos-25.11 at 10e7ad5b; flake.nix, modules and profiles import; nixosModules have keys"

# ----------------------------------------------------------- 3. vendorHash
tests/nix/check-vendor-hash.sh || die "vendor hash (above)"
step "3. vendorHash matches"

# ------------------------------------------------------ 4. qemu-img convert
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
truncate -s 64M "$work/disk.raw"
for off in 0 7 1000 65535; do # data in a few clusters, holes elsewhere
	printf 'agentbox %d\n' "$off" | dd of="$work/disk.raw" bs=4096 seek="$off" conv=notrunc status=none
done
for i in 1 2; do
	qemu-img convert -q -f raw -O qcow2 -o compat=1.1,cluster_size=65536,lazy_refcounts=off,preallocation=off \
		"$work/disk.raw" "$work/disk$i.qcow2"
done
cmp -s "$work/disk1.qcow2" "$work/disk2.qcow2" || die "qemu-img convert wrote two different qcow2 files from one raw"
step "4. qemu-img convert is deterministic ($(qemu-img --version | head -n1))"

# ------------------------------------------------------- 5. image builder
go test -count=1 ./tests/nix/ || die "image builder (go test ./tests/nix, above)"
step "5. nix/make-image.sh is reproducible ($(mke2fs -V 2>&1 | head -n1)); the host firewall rules work with $(nft --version) and $(iptables -V)"
step "all Nix checks passed"
