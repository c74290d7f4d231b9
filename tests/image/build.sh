#!/usr/bin/env bash
# Build the agentbox test image (vmlinuz + initrd.img + rootfs.qcow2 +
# manifest.toml, see docs/image-format.md) from Debian packages.
#
# Usage: tests/image/build.sh [-f|--force] [-h|--help]
#
# Progress and step timings go to stderr; the LAST line on stdout is the
# image directory. See tests/image/README.md for inputs, cache and env vars.
set -euo pipefail

# Bump when the build recipe changes in a way the input hashes do not catch.
SCRIPT_VERSION=1

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)

SUITE=${SUITE:-bookworm}
ARCH=amd64
KERNEL_META=${KERNEL_META:-linux-image-cloud-amd64}
ROOTFS_PACKAGES=${ROOTFS_PACKAGES:-python3,qemu-guest-agent}
ROOTFS_SIZE=${ROOTFS_SIZE:-2G}
INITRD_COMPRESS=${INITRD_COMPRESS:-none} # none | gzip
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1704067200} # 2024-01-01T00:00:00Z
export SOURCE_DATE_EPOCH
CACHE=${AGENTBOX_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentbox}

# Kernel command line: the contract's base plus extra flags. None of the usual
# boot-speed flags (8250.nr_uarts=1, no_timer_check, mitigations=off, nokaslr)
# made a measurable difference under TCG (measured when the image was made); tsc=reliable is kept so
# the clocksource watchdog cannot demote the TSC to the (MMIO-emulated, slow)
# HPET when the host is overloaded. no_timer_check skips the boot-time check
# that timer interrupts arrive through the IO-APIC within a few ticks: on an
# overloaded host a TCG vCPU can miss that window, and the kernel then panics
# ("IO-APIC + timer doesn't work!"; seen in CI at load 13 on 2 cores).
CMDLINE_BASE="console=ttyS0 root=/dev/vda rw panic=-1 quiet"
CMDLINE_EXTRA=${CMDLINE_EXTRA-"tsc=reliable no_timer_check"}
CMDLINE="$CMDLINE_BASE${CMDLINE_EXTRA:+ $CMDLINE_EXTRA}"

# Modules the initramfs loads (dependencies are resolved from each module's
# modinfo "depends=" and loaded first). ext4 is added if it is not built in.
WANT_MODULES=(virtio_ring virtio virtio_pci virtio_blk virtio_console virtio_net virtio_rng)

# Fixed identifiers so that the filesystem is reproducible.
FS_UUID=6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0001
FS_HASH_SEED=6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0002

FORCE=0
for arg in "$@"; do
	case "$arg" in
	-f | --force) FORCE=1 ;;
	-h | --help)
		sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build.sh: unknown argument: $arg (try --help)" >&2
		exit 2
		;;
	esac
done

log() { echo "[test-image] $*" >&2; }
die() {
	echo "[test-image] ERROR: $*" >&2
	exit 1
}

T_TOTAL=$EPOCHREALTIME
T_STEP=
step_begin() {
	T_STEP=$EPOCHREALTIME
	log "$*..."
}
step_end() {
	log "$1 took $(awk -v a="$T_STEP" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2fs", b-a}')"
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }
sha256_str() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }

# ---------------------------------------------------------------- preflight
[ "$(id -u)" -eq 0 ] || die "must run as root (debootstrap, file ownership in the root filesystem, device nodes)"
for tool in apt-cache apt-get dpkg-deb debootstrap mke2fs qemu-img cpio tar zstd sha256sum awk; do
	command -v "$tool" >/dev/null || die "missing tool: $tool"
done

mkdir -p "$CACHE/debs" "$CACHE/rootfs" "$CACHE/images"
WORK=$(mktemp -d "$CACHE/.build.XXXXXX")
cleanup() {
	local rc=$?
	# debootstrap mounts proc/sys in the target; never recurse into them.
	local m
	for m in dev/pts dev proc sys run; do
		mountpoint -q "$WORK/root/$m" 2>/dev/null && umount -l "$WORK/root/$m" || true
	done
	rm -rf --one-file-system "$WORK"
	[ -z "${TMP_IMAGE:-}" ] || rm -rf --one-file-system "$TMP_IMAGE"
	[ -z "${TMP_ROOTFS_TAR:-}" ] || rm -f "$TMP_ROOTFS_TAR"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Mirror for debootstrap: $MIRROR, else the host's apt source carrying $SUITE.
detect_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		uri=$(awk -v suite="$SUITE" '
			/^[[:space:]]*#/ { next }
			/^[[:space:]]*$/ { if (u != "" && s) { print u; exit } u = ""; s = 0; next }
			tolower($1) == "uris:" { u = $2 }
			tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == suite) s = 1 }
			END { if (u != "" && s) print u }' "$f" | head -n1)
		[ -z "$uri" ] || { echo "$uri"; return; }
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		uri=$(awk -v suite="$SUITE" '
			$1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++
				if ($(i + 1) == suite) { print $i; exit } }' "$f")
		[ -z "$uri" ] || { echo "$uri"; return; }
	done
	die "no apt source for suite $SUITE found in /etc/apt; set MIRROR=http://.../debian"
}
MIRROR=${MIRROR:-$(detect_mirror)}
log "suite $SUITE, mirror $MIRROR, cache $CACHE"

# Download the candidate version of a package into $CACHE/debs (verified
# against apt's SHA256); prints the path.
# apt-cache is slow (~1 s a call), so query several packages at once.
apt_show() { apt-cache show --no-all-versions "$@" 2>/dev/null || die "apt-cache knows no package in: $* (apt-get update?)"; }
# stanza PKG < apt_show-output: the record of package PKG.
stanza() { awk -v p="$1" '/^Package: /{on = ($2 == p)} on' ; }
fetch_deb() {
	local pkg=$1 info=$2 ver want file dl
	ver=$(sed -n 's/^Version: //p' <<<"$info" | head -n1)
	want=$(sed -n 's/^SHA256: //p' <<<"$info" | head -n1)
	[ -n "$ver" ] && [ -n "$want" ] || die "no version/SHA256 for $pkg in apt-cache"
	file="$CACHE/debs/${pkg}_${ver//:/%3a}_$ARCH.deb"
	if [ -f "$file" ] && [ "$(sha256 "$file")" = "$want" ]; then
		echo "$file"
		return
	fi
	dl="$WORK/dl-$pkg"
	mkdir -p "$dl"
	chmod 0777 "$dl" # lets apt's sandbox user write here
	(cd "$dl" && apt-get download -q "$pkg=$ver" >&2) || die "apt-get download $pkg=$ver failed"
	local got
	got=$(ls "$dl"/*.deb)
	[ "$(sha256 "$got")" = "$want" ] || die "sha256 mismatch for $got"
	mv -f "$got" "$file"
	echo "$file"
}

# ------------------------------------------------------------------ kernel
step_begin "kernel: resolve and fetch"
APT_INFO=$(apt_show "$KERNEL_META" busybox-static)
KERNEL_PKG=$(stanza "$KERNEL_META" <<<"$APT_INFO" |
	sed -n 's/^Depends: //p' | tr ',' '\n' | sed 's/^ *//; s/ .*//' | grep '^linux-image-' | head -n1) ||
	true
[ -n "$KERNEL_PKG" ] || die "cannot resolve the kernel package behind $KERNEL_META"
KERNEL_VERSION=${KERNEL_PKG#linux-image-}
KERNEL_DEB=$(fetch_deb "$KERNEL_PKG" "$(apt_show "$KERNEL_PKG")")
BUSYBOX_DEB=$(fetch_deb busybox-static "$(stanza busybox-static <<<"$APT_INFO")")
log "kernel $KERNEL_PKG ($(basename "$KERNEL_DEB")), busybox $(basename "$BUSYBOX_DEB")"
step_end "kernel: resolve and fetch"

# ------------------------------------------------------------------- agent
step_begin "agent binary"
if [ -n "${AGENT_BIN:-}" ]; then
	[ -f "$AGENT_BIN" ] || die "AGENT_BIN=$AGENT_BIN does not exist"
	cp "$AGENT_BIN" "$WORK/agentbox-guest"
	log "using prebuilt agent $AGENT_BIN"
else
	[ -d "$REPO_ROOT/cmd/agentbox-guest" ] ||
		die "$REPO_ROOT/cmd/agentbox-guest does not exist; set AGENT_BIN=path/to/agentbox-guest"
	command -v go >/dev/null || die "go not found; set AGENT_BIN=path/to/agentbox-guest"
	(cd "$REPO_ROOT" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 \
		go build -trimpath -buildvcs=false -tags "${AGENT_TAGS:-}" -o "$WORK/agentbox-guest" ./cmd/agentbox-guest) ||
		die "building ./cmd/agentbox-guest failed; set AGENT_BIN to use a prebuilt binary"
fi
AGENT_SHA=$(sha256 "$WORK/agentbox-guest")
step_end "agent binary"

# ------------------------------------------------------------- cache keys
rootfs_cleanup() {
	# Runs on the debootstrap tree: drop what a test VM never needs.
	local r=$1
	rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* "$r"/var/cache/debconf/*-old \
		"$r"/var/log/* "$r"/var/cache/ldconfig/aux-cache "$r"/debootstrap \
		"$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/info/* \
		"$r"/usr/share/locale/* "$r"/usr/share/lintian/* "$r"/tmp/* "$r"/var/tmp/*
	# Not systemd-booted; an empty machine-id keeps the tree identical.
	: >"$r/etc/machine-id"
	rm -f "$r/var/lib/dbus/machine-id"
	mkdir -p "$r/usr/local/bin"
	# Clamp timestamps for reproducibility.
	find "$r" -xdev -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
}

ROOTFS_KEY=$(sha256_str "rootfs v$SCRIPT_VERSION
suite=$SUITE arch=$ARCH variant=minbase
packages=$ROOTFS_PACKAGES
mirror=$MIRROR
epoch=$SOURCE_DATE_EPOCH
$(declare -f rootfs_cleanup)")
ROOTFS_TAR="$CACHE/rootfs/$ROOTFS_KEY.tar.zst"

IMAGE_KEY=$(sha256_str "image v$SCRIPT_VERSION
kernel=$(sha256 "$KERNEL_DEB") $KERNEL_PKG
busybox=$(sha256 "$BUSYBOX_DEB")
rootfs=$ROOTFS_KEY
agent=$AGENT_SHA
script=$(sha256 "${BASH_SOURCE[0]}")
init=$(sha256 "$SCRIPT_DIR/init")
cmdline=$CMDLINE
size=$ROOTFS_SIZE initrd=$INITRD_COMPRESS epoch=$SOURCE_DATE_EPOCH")
IMAGE_DIR="$CACHE/images/$IMAGE_KEY"

image_complete() {
	local d=$1 f
	[ -f "$d/manifest.toml" ] || return 1
	for f in vmlinuz initrd.img rootfs.qcow2; do
		[ -s "$d/$f" ] || return 1
	done
}

if [ "$FORCE" = 0 ] && image_complete "$IMAGE_DIR"; then
	log "cached image $IMAGE_DIR"
	log "total $(awk -v a="$T_TOTAL" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2fs", b-a}')"
	echo "$IMAGE_DIR"
	exit 0
fi

TMP_IMAGE=$(mktemp -d "$CACHE/images/.tmp-$IMAGE_KEY.XXXXXX")

# ------------------------------------------------------------- initramfs
step_begin "initramfs"
KX="$WORK/kernel"
mkdir -p "$KX"
dpkg-deb -x "$KERNEL_DEB" "$KX"
MODDIR="$KX/lib/modules/$KERNEL_VERSION"
[ -f "$KX/boot/vmlinuz-$KERNEL_VERSION" ] || die "no boot/vmlinuz-$KERNEL_VERSION in $KERNEL_DEB"
[ -d "$MODDIR" ] || die "no lib/modules/$KERNEL_VERSION in $KERNEL_DEB"

builtin_module() { grep -q "/$1\.ko\$" "$MODDIR/modules.builtin"; }
module_path() {
	# Module names use _ where file names may use - (crc32c-intel).
	local alt=${1//_/-} p
	p=$(find "$MODDIR/kernel" \( -name "$1.ko" -o -name "$alt.ko" \) -print -quit)
	[ -n "$p" ] || return 1
	echo "$p"
}
module_deps() { tr '\0' '\n' <"$1" | sed -n 's/^depends=//p' | head -n1 | tr ',' ' '; }

declare -A MOD_SEEN=()
MOD_ORDER=()
add_module() {
	local m=${1//-/_} p d
	[ -z "${MOD_SEEN[$m]:-}" ] || return 0
	MOD_SEEN[$m]=1
	if builtin_module "$m" || builtin_module "${m//_/-}"; then
		return 0
	fi
	p=$(module_path "$m") || die "kernel module $m is neither built in nor shipped in $KERNEL_PKG"
	for d in $(module_deps "$p"); do
		add_module "$d"
	done
	MOD_ORDER+=("$m")
}
for m in "${WANT_MODULES[@]}"; do add_module "$m"; done
if builtin_module ext4; then
	log "ext4 is built into the kernel"
else
	add_module ext4
fi
log "modules (load order): ${MOD_ORDER[*]}"

IR="$WORK/initramfs"
mkdir -p "$IR"/{bin,dev,proc,sys,newroot,etc,lib/modules}
dpkg-deb --fsys-tarfile "$BUSYBOX_DEB" | tar -xf - -C "$WORK" ./bin/busybox
mv "$WORK/bin/busybox" "$IR/bin/busybox"
for a in sh mount umount insmod sleep cat switch_root poweroff sync echo; do
	ln -s busybox "$IR/bin/$a"
done
mknod -m 600 "$IR/dev/console" c 5 1
mknod -m 666 "$IR/dev/null" c 1 3
install -m 0755 "$SCRIPT_DIR/init" "$IR/init"
: >"$IR/etc/modules"
for m in "${MOD_ORDER[@]}"; do
	cp "$(module_path "$m")" "$IR/lib/modules/$m.ko"
	echo "$m" >>"$IR/etc/modules"
done
find "$IR" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
(cd "$IR" && find . -mindepth 1 | LC_ALL=C sort |
	cpio --quiet -o -H newc -R 0:0 --reproducible) >"$WORK/initrd.cpio"
case "$INITRD_COMPRESS" in
none) mv "$WORK/initrd.cpio" "$TMP_IMAGE/initrd.img" ;;
gzip) gzip -9 -n -c "$WORK/initrd.cpio" >"$TMP_IMAGE/initrd.img" ;;
*) die "INITRD_COMPRESS must be none or gzip" ;;
esac
cp "$KX/boot/vmlinuz-$KERNEL_VERSION" "$TMP_IMAGE/vmlinuz"
log "initrd.img $(stat -c %s "$TMP_IMAGE/initrd.img") bytes ($INITRD_COMPRESS), vmlinuz $(stat -c %s "$TMP_IMAGE/vmlinuz") bytes"
step_end "initramfs"

# ---------------------------------------------------------------- rootfs
if [ -f "$ROOTFS_TAR" ]; then
	log "cached rootfs tarball $ROOTFS_TAR"
else
	step_begin "debootstrap $SUITE ($ROOTFS_PACKAGES)"
	debootstrap --arch="$ARCH" --variant=minbase --include="$ROOTFS_PACKAGES" \
		"$SUITE" "$WORK/root" "$MIRROR" >&2 || {
		tail -n 30 "$WORK/root/debootstrap/debootstrap.log" >&2 2>/dev/null || true
		die "debootstrap failed (log tail above)"
	}
	rootfs_cleanup "$WORK/root"
	TMP_ROOTFS_TAR=$(mktemp "$CACHE/rootfs/.tmp-$ROOTFS_KEY.XXXXXX")
	tar --sort=name --numeric-owner --xattrs --xattrs-include='*' --one-file-system \
		-C "$WORK/root" -cf - . | zstd -q -T0 -10 -f -o "$TMP_ROOTFS_TAR"
	mv -f "$TMP_ROOTFS_TAR" "$ROOTFS_TAR"
	TMP_ROOTFS_TAR=
	rm -rf --one-file-system "$WORK/root"
	step_end "debootstrap $SUITE ($ROOTFS_PACKAGES)"
fi

step_begin "root filesystem image"
mkdir -p "$WORK/root"
zstd -q -d -c "$ROOTFS_TAR" | tar --numeric-owner --xattrs --xattrs-include='*' -xpf - -C "$WORK/root"
install -m 0755 -o 0 -g 0 "$WORK/agentbox-guest" "$WORK/root/usr/local/bin/agentbox-guest"
# debootstrap copies the build host's resolver and hostname into the tree:
# an image must not carry them. The guest agent writes resolv.conf when the
# sandbox has a network (agentbox.net=) and the hostname at boot. (Here, not
# in rootfs_cleanup, so the cached debootstrap tarball stays valid; the
# script's hash in IMAGE_KEY changes the image.)
rm -f "$WORK/root/etc/resolv.conf" "$WORK/root/etc/hostname"
echo "# agentbox: written by the guest agent when the sandbox has a network" >"$WORK/root/etc/resolv.conf"
echo "agentbox" >"$WORK/root/etc/hostname"
chmod 0644 "$WORK/root/etc/resolv.conf" "$WORK/root/etc/hostname"
# The account E2B's SDK runs commands as ("user": uid and gid 1000, home
# /home/user from /etc/skel, bash), beside root; the agent still runs
# commands as root unless a request names a user (ExecRequest.User) or uid.
r=$WORK/root
echo "user:x:1000:1000:sandbox user:/home/user:/bin/bash" >>"$r/etc/passwd"
echo "user:x:1000:" >>"$r/etc/group"
echo "user:!:19723:0:99999:7:::" >>"$r/etc/shadow"
echo "user:!::" >>"$r/etc/gshadow"
cp -a "$r/etc/skel" "$r/home/user"
chown -R 1000:1000 "$r/home/user"
chmod 0755 "$r/home/user"
find "$r/home" "$r/etc/passwd" "$r/etc/group" "$r/etc/shadow" "$r/etc/gshadow" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
touch -h -d "@$SOURCE_DATE_EPOCH" "$WORK/root/usr/local/bin/agentbox-guest" "$WORK/root/usr/local/bin" \
	"$WORK/root/etc/resolv.conf" "$WORK/root/etc/hostname" "$WORK/root/etc"
# E2FSPROGS_FAKE_TIME pins the superblock/inode creation times.
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mke2fs -q -F -t ext4 -L agentbox-root \
	-U "$FS_UUID" -m 0 \
	-E "hash_seed=$FS_HASH_SEED,lazy_itable_init=0,lazy_journal_init=0,nodiscard" \
	-d "$WORK/root" "$WORK/rootfs.raw" "$ROOTFS_SIZE" >&2
qemu-img convert -q -f raw -O qcow2 "$WORK/rootfs.raw" "$TMP_IMAGE/rootfs.qcow2"
rm -f "$WORK/rootfs.raw"
rm -rf --one-file-system "$WORK/root"
step_end "root filesystem image"

# -------------------------------------------------------------- manifest
step_begin "manifest"
chmod 0444 "$TMP_IMAGE/vmlinuz" "$TMP_IMAGE/initrd.img" "$TMP_IMAGE/rootfs.qcow2"
cat >"$TMP_IMAGE/manifest.toml" <<EOF
format = 1
name = "agentbox-test"
kernel = "vmlinuz"
initrd = "initrd.img"
disk = "rootfs.qcow2"
cmdline = "$CMDLINE"
agent_port = "org.agentbox.agent.0"
kernel_version = "$KERNEL_VERSION"
[resources]
vcpus = 1
memory_mib = 512
[sha256]
vmlinuz = "$(sha256 "$TMP_IMAGE/vmlinuz")"
"initrd.img" = "$(sha256 "$TMP_IMAGE/initrd.img")"
"rootfs.qcow2" = "$(sha256 "$TMP_IMAGE/rootfs.qcow2")"
EOF
chmod 0444 "$TMP_IMAGE/manifest.toml"
chmod 0755 "$TMP_IMAGE"
if [ -e "$IMAGE_DIR" ]; then
	# --force, or a leftover incomplete directory: replace it.
	rm -rf --one-file-system "$IMAGE_DIR"
fi
mv -T "$TMP_IMAGE" "$IMAGE_DIR"
TMP_IMAGE=
step_end "manifest"

log "image $IMAGE_DIR ($(du -sh --apparent-size "$IMAGE_DIR" | cut -f1) apparent)"
log "total $(awk -v a="$T_TOTAL" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2fs", b-a}')"
echo "$IMAGE_DIR"
