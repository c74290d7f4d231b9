#!/usr/bin/env bash
# Prepares a Debian 12 host (or CI machine) to run agentbox and its tests:
# installs the Debian packages it needs, configures libvirt's QEMU driver and
# starts virtlogd and libvirtd when they are not running (with or without
# systemd). Idempotent; needs root. Meant for test and CI machines: it sets
# qemu.conf user/group to root (see below), which a production host should
# not do.
set -euo pipefail

[ "$(id -u)" = 0 ] || { echo "host-setup: run as root (sudo $0)" >&2; exit 1; }

packages=(
  libvirt-daemon-system libvirt-clients libvirt-daemon-driver-qemu
  qemu-system-x86 qemu-utils
  debootstrap busybox-static cpio e2fsprogs zstd
  distro-info-data make tini procps
  tmux
  nix-bin
  nftables iptables iproute2
  protobuf-compiler libprotobuf-dev
  python3-pytest python3-yaml
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "host-setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# libvirt's QEMU driver runs qemu as libvirt-qemu by default. Where that user
# cannot open /dev/kvm (or /dev/kvm does not exist), libvirt 9.0 re-probes the
# QEMU binary's capabilities on every domain start (~48 s seen here). On test
# machines run qemu as root instead.
conf=/etc/libvirt/qemu.conf
if ! grep -q '^user = "root"' "$conf"; then
  sed -i 's/^#\?user = .*/user = "root"/; s/^#\?group = .*/group = "root"/' "$conf"
  grep -q '^user = "root"' "$conf" || echo 'user = "root"' >>"$conf"
  grep -q '^group = "root"' "$conf" || echo 'group = "root"' >>"$conf"
  restart=1
fi

# QEMU's own seccomp sandbox (-sandbox on,obsolete=deny,elevateprivileges=deny,
# spawn=deny,resourcecontrol=deny): libvirt's default, made explicit so a
# local edit cannot turn it off unnoticed (docs/security.md).
if ! grep -q '^seccomp_sandbox = 1' "$conf"; then
  sed -i 's/^#\?seccomp_sandbox = .*/seccomp_sandbox = 1/' "$conf"
  grep -q '^seccomp_sandbox = 1' "$conf" || echo 'seccomp_sandbox = 1' >>"$conf"
  # The value libvirt used already (its default): no restart needed.
fi
# serve --qemu-uid-range runs each QEMU as a uid of its own; libvirt puts
# that domain's master key in /var/lib/libvirt/qemu/domain-N-NAME/ (owned by
# the domain's uid) but leaves the parent as qemu.conf's user made it
# (root, 0750), which the domain's uid cannot pass. o+x lets it pass; the
# per-domain directories stay 0750 of their own uid.
mkdir -p /var/lib/libvirt/qemu
chmod o+x /var/lib/libvirt/qemu

# running NAME: a live (not zombie) process NAME exists. A killed daemon can
# linger as a zombie where PID 1 reaps slowly; it must not count.
running() { ps -C "$1" -o stat= 2>/dev/null | grep -qv '^Z'; }
if [ -d /run/systemd/system ]; then
  systemctl start virtlogd.socket libvirtd.socket libvirtd.service >&2 || true
  [ -n "${restart:-}" ] && systemctl restart libvirtd.service >&2
else
  # libvirt daemonizes each qemu process, so an exited qemu is reparented to
  # the nearest subreaper or PID 1 and libvirt waits until that reaps it. On
  # machines whose PID 1 reaps slowly (seen here: ~2 s per domain destroy)
  # run libvirtd under `tini -s`, a child subreaper that reaps at once.
  under_tini() {
    local pid ppid
    pid=$(ps -C libvirtd -o pid=,stat= | awk '$2 !~ /^Z/ {print $1; exit}')
    [ -n "$pid" ] || return 1
    # ps pads the number ("   1524"), which ps -p then refuses.
    ppid=$(ps -o ppid= -p "$pid" | tr -d ' ')
    [ "$(ps -o comm= -p "$ppid")" = tini ]
  }
  if running libvirtd && { [ -n "${restart:-}" ] || ! under_tini; }; then
    pkill -x libvirtd
    while running libvirtd; do sleep 0.1; done
  fi
  running virtlogd || virtlogd -d
  # Only the daemon goes to the background, with its own stdio: a
  # backgrounded `running || setsid …` list would keep this script's stdout
  # open and hang a `make host-setup | tail`.
  if ! running libvirtd; then
    setsid tini -s -- libvirtd </dev/null >>/var/log/libvirtd.stdout 2>&1 &
  fi
fi
for _ in $(seq 100); do
  [ -S /var/run/libvirt/libvirt-sock ] && virsh -c qemu:///system version >/dev/null 2>&1 && break
  sleep 0.1
done
virsh -c qemu:///system version >/dev/null || { echo "host-setup: libvirtd does not answer on qemu:///system" >&2; exit 1; }
echo "host-setup: libvirtd ready" >&2
