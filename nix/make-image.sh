#!/usr/bin/env bash
# Builds one agentbox image directory (docs/image-format.md: manifest.toml,
# vmlinuz, initrd.img, rootfs.qcow2) from a NixOS system closure, byte for byte
# reproducibly and without a VM. nix/make-image.nix runs it as the builder of
# `legacyPackages.<system>.images.<profile>`; tests/nix runs it with Debian's
# e2fsprogs and qemu-img on a small fake closure to prove the recipe.
#
# Usage: make-image.sh OUT_DIR
#
# Inputs come from the environment (all required):
#   closureInfo      directory of nixpkgs' closureInfo: store-paths, total-nar-size
#   kernel, initrd   files copied to vmlinuz and initrd.img
#   imageName, cmdline, kernelVersion, agentPort
#                    manifest fields (cmdline starts with init=<toplevel>/init)
#   vcpus, memoryMiB default resources written to [resources] (count, MiB)
#   networkPolicy, networkAllow  optional default network policy written to [network]
#                 (none|allowlist|open; allow: DEST strings, one per line)
#   extraSpaceMiB    free space left in the root file system, in MiB
#   fsUUID, fsHashSeed, fsLabel
#                    ext4 UUID, directory hash seed (a UUID) and label
#   SOURCE_DATE_EPOCH
#                    seconds; every time in the file system is this or 1
#   mke2fsConf       optional, default: mke2fs.conf next to this script
#
# What makes the bytes reproducible:
# - The store paths are copied without hard links (`nix-store --optimise`
#   links differ between hosts), xattrs are not copied, and every atime and
#   mtime is set to 1 (the store's own mtime) before mke2fs sees them.
# - mke2fs -d walks directories in sorted order (LC_ALL=C), with a fixed
#   UUID (-U), hash seed, root owner and zeroed inode tables and journal in
#   ONE -E list, the features of nix/mke2fs.conf (not the host's), and its
#   own clock pinned (E2FSPROGS_FAKE_TIME, SOURCE_DATE_EPOCH).
# - Then debugfs sets, for every inode in use, uid and gid to 0 and atime,
#   ctime and crtime to SOURCE_DATE_EPOCH: ctime cannot be set on the copy
#   (the kernel stamps it), e2fsprogs before 1.47.1 copies it as is, and the
#   build user's uid differs between hosts (no fakeroot needed).
# - qemu-img convert writes clusters in guest order (never -W) with fixed
#   qcow2 options; the qcow2 header holds no time.
set -euo pipefail
export LC_ALL=C
umask 022

die() {
	echo "make-image: $*" >&2
	exit 1
}

[ $# -eq 1 ] || die "usage: make-image.sh OUT_DIR (inputs in the environment, see the header)"
out=$1
script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mke2fsConf=${mke2fsConf:-$script_dir/mke2fs.conf}

for v in closureInfo kernel initrd imageName cmdline kernelVersion agentPort vcpus memoryMiB \
	extraSpaceMiB fsUUID fsHashSeed fsLabel SOURCE_DATE_EPOCH; do
	[ -n "${!v:-}" ] || die "environment variable $v is not set (see the header of make-image.sh)"
done
for t in mke2fs debugfs dumpe2fs e2fsck qemu-img sha256sum find touch cp awk; do
	command -v "$t" >/dev/null || die "missing tool: $t (e2fsprogs, qemu-img, coreutils, findutils, gawk)"
done
[ -f "$closureInfo/store-paths" ] || die "$closureInfo/store-paths missing: closureInfo must be nixpkgs' closureInfo output"
[ -f "$mke2fsConf" ] || die "mke2fs configuration $mke2fsConf missing"
for f in kernel initrd; do
	[ -f "${!f}" ] || die "$f ${!f} is not a file"
done
case "$SOURCE_DATE_EPOCH" in '' | *[!0-9]*) die "SOURCE_DATE_EPOCH must be seconds since 1970, got '$SOURCE_DATE_EPOCH'" ;; esac

work=$(mktemp -d "${TMPDIR:-/tmp}/agentbox-image.XXXXXX")
cleanup() {
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# ------------------------------------------------------------ staging tree
root=$work/root
mkdir -p "$root/nix/store"
# Mount points stage 1 and stage 2 of NixOS use; everything else (/etc, /var,
# users, machine-id) is created at boot by the activation script.
mkdir -p "$root"/{dev,proc,sys,run,tmp,etc,var}
chmod 1777 "$root/tmp"
while IFS= read -r p; do
	[ -n "$p" ] || continue
	# -P keeps symlinks; no --preserve=links: hard links become plain copies.
	cp -R -P --preserve=mode,timestamps -- "$p" "$root/nix/store/" ||
		die "cannot copy $p into the image tree"
done <"$closureInfo/store-paths"
find "$root" -exec touch -h -d @1 {} +

# ------------------------------------------------------------------ sizes
mib=1048576
narSize=$(cat "$closureInfo/total-nar-size" 2>/dev/null || echo 0)
nfiles=$(find "$root" | wc -l)
# Contents plus one block per file, 15% ext4 overhead, 128 MiB for the
# journal and metadata, plus the free space the profile asks for.
sizeMiB=$(((narSize + nfiles * 4096) * 115 / 100 / mib + 1 + 128 + extraSpaceMiB))
# At least two inodes per copied file plus 64Ki for the sandbox (8 KiB per
# inode, nix/mke2fs.conf).
inodeMiB=$(((nfiles * 2 + 65536) * 8192 / mib + 1))
[ "$sizeMiB" -ge "$inodeMiB" ] || sizeMiB=$inodeMiB
sizeMiB=$(((sizeMiB + 63) / 64 * 64))
echo "make-image: $nfiles files, $narSize bytes of store paths, file system of $sizeMiB MiB" >&2

# -------------------------------------------------------------------- ext4
raw=$work/rootfs.raw
export MKE2FS_CONFIG=$mke2fsConf E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH SOURCE_DATE_EPOCH
mke2fs -q -F -t ext4 -L "$fsLabel" -U "$fsUUID" -m 0 \
	-E "hash_seed=$fsHashSeed,root_owner=0:0,lazy_itable_init=0,lazy_journal_init=0,nodiscard,no_copy_xattrs" \
	-d "$root" "$raw" "${sizeMiB}M" >&2 ||
	die "mke2fs failed; if it ran out of space or inodes, raise agentbox.guest.image.extraSpaceMiB"

# Every inode in use: the root directory (2) and first_ino (11) onwards,
# minus the free ranges dumpe2fs lists per group.
cmds=$work/debugfs.cmds
dumpe2fs "$raw" 2>/dev/null | awk -v t="@$SOURCE_DATE_EPOCH" '
	function emit(i) {
		printf "sif <%d> uid 0\nsif <%d> gid 0\nsif <%d> atime %s\nsif <%d> ctime %s\nsif <%d> crtime %s\n",
			i, i, i, t, i, t, i, t
	}
	function used(lo, hi,   i) {
		if (lo < first) lo = first
		for (i = lo; i <= hi; i++) emit(i)
	}
	/^Inodes per group:/ { ipg = $4 }
	/^First inode:/ { first = $3 }
	/^Group [0-9]+:/ { g = $2; sub(":", "", g); groups++ }
	/^  Free inodes:/ {
		lo = g * ipg + 1; hi = (g + 1) * ipg; next_used = lo
		list = $0; sub(/^  Free inodes: */, "", list)
		n = split(list, ranges, /, */)
		for (k = 1; k <= n; k++) {
			if (ranges[k] == "") continue
			m = split(ranges[k], ab, "-"); a = ab[1] + 0; b = (m > 1 ? ab[2] : ab[1]) + 0
			if (a > next_used) used(next_used, a - 1)
			next_used = b + 1
		}
		if (next_used <= hi) used(next_used, hi)
	}
	END {
		if (!ipg || !first || !groups) { print "dumpe2fs output not understood" > "/dev/stderr"; exit 1 }
		emit(2)
	}' >"$cmds" || die "cannot list the inodes in use (dumpe2fs)"
debugfs -w -f "$cmds" "$raw" >/dev/null 2>"$work/debugfs.err" || die "debugfs failed: $(tail -n 5 "$work/debugfs.err")"
if grep -v '^debugfs [0-9.]* (' "$work/debugfs.err" | grep -q .; then
	die "debugfs reported errors: $(grep -v '^debugfs [0-9.]* (' "$work/debugfs.err" | head -n 5)"
fi
e2fsck -f -n "$raw" >"$work/e2fsck.log" 2>&1 || die "e2fsck found errors in the new file system: $(tail -n 20 "$work/e2fsck.log")"

# ------------------------------------------------------------------ image
mkdir -p "$out"
qemu-img convert -q -f raw -O qcow2 -o compat=1.1,cluster_size=65536,lazy_refcounts=off,preallocation=off \
	"$raw" "$out/rootfs.qcow2"
cp -- "$kernel" "$out/vmlinuz"
cp -- "$initrd" "$out/initrd.img"

toml_str() {
	case "$1" in *$'\n'* | *$'\r'*) die "manifest value contains a line break: $1" ;; esac
	local s=${1//\\/\\\\}
	printf '"%s"' "${s//\"/\\\"}"
}
sha() { sha256sum "$1" | cut -d' ' -f1; }
{
	echo "format = 1"
	echo "name = $(toml_str "$imageName")"
	echo 'kernel = "vmlinuz"'
	echo 'initrd = "initrd.img"'
	echo 'disk = "rootfs.qcow2"'
	echo "cmdline = $(toml_str "$cmdline")"
	echo "agent_port = $(toml_str "$agentPort")"
	echo "kernel_version = $(toml_str "$kernelVersion")"
	echo "[resources]"
	echo "vcpus = $vcpus"
	echo "memory_mib = $memoryMiB"
	if [ -n "${networkPolicy:-}" ] && [ "$networkPolicy" != none ]; then
		echo "[network]"
		echo "policy = $(toml_str "$networkPolicy")"
		allow=
		while IFS= read -r dest; do
			[ -n "$dest" ] && allow="$allow${allow:+, }$(toml_str "$dest")"
		done <<<"${networkAllow:-}"
		echo "allow = [$allow]"
	fi
	echo "[sha256]"
	echo "vmlinuz = \"$(sha "$out/vmlinuz")\""
	echo "\"initrd.img\" = \"$(sha "$out/initrd.img")\""
	echo "\"rootfs.qcow2\" = \"$(sha "$out/rootfs.qcow2")\""
} >"$out/manifest.toml"
chmod 0444 "$out"/*
echo "make-image: wrote $out" >&2
