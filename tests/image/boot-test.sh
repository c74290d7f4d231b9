#!/usr/bin/env bash
# Boot an image directory under raw QEMU (TCG by default) on a throwaway qcow2
# overlay and report how long it takes until PATTERN shows on the serial
# console. Never writes to the image; the guest gets no NIC.
#
# Usage: tests/image/boot-test.sh IMAGE_DIR [PATTERN]
#   PATTERN defaults to "agentbox-guest: ready" (printed by a placeholder
#   agent); use e.g. a line the real agent prints.
# Env: ACCEL=tcg|kvm  MACHINE=pc|q35  BIOS=path (e.g. /usr/share/qemu/qboot.rom)
#      CMDLINE=... (overrides the manifest's)  TIMEOUT=seconds (default 60)
#      QEMU=qemu-system-x86_64  VERBOSE=1 (echo the console)
# Prints "boot-test: PATTERN after N.NNs" and exits 0 when the pattern
# appears and the guest then stops, 1 otherwise.
set -euo pipefail

dir=${1:?usage: boot-test.sh IMAGE_DIR [PATTERN]}
pattern=${2:-agentbox-guest: ready}
ACCEL=${ACCEL:-tcg}
MACHINE=${MACHINE:-pc}
TIMEOUT=${TIMEOUT:-60}
QEMU=${QEMU:-qemu-system-x86_64}

manifest_get() { sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$dir/manifest.toml"; }
kernel=$dir/$(manifest_get kernel)
initrd=$dir/$(manifest_get initrd)
disk=$(cd "$dir" && pwd)/$(manifest_get disk)
cmdline=${CMDLINE:-$(manifest_get cmdline)}
port=$(manifest_get agent_port)
mem=$(sed -n 's/^memory_mib = //p' "$dir/manifest.toml")

tmp=$(mktemp -d)
qpid=
cleanup() {
	[ -z "$qpid" ] || kill "$qpid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

qemu-img create -q -f qcow2 -F qcow2 -b "$disk" "$tmp/overlay.qcow2"
args=(-accel "$ACCEL" -machine "$MACHINE" -m "${mem:-512}" -nodefaults -display none
	-serial stdio -kernel "$kernel" -initrd "$initrd" -append "$cmdline"
	-drive "file=$tmp/overlay.qcow2,if=virtio,format=qcow2"
	-device virtio-serial -chardev "socket,id=a,path=$tmp/agent.sock,server=on,wait=off"
	-device "virtserialport,chardev=a,name=$port" -no-reboot)
[ -z "${BIOS:-}" ] || args+=(-bios "$BIOS")
[ -z "${RNG:-}" ] || args+=(-object rng-random,id=rng0,filename=/dev/urandom -device virtio-rng-pci,rng=rng0)
[ -z "${CPU:-}" ] || args+=(-cpu "$CPU")

start=$EPOCHREALTIME
found=
exec 3< <(timeout "$TIMEOUT" "$QEMU" "${args[@]}" </dev/null 2>&1; echo "boot-test: qemu exited rc=$?")
while IFS= read -r line <&3; do
	now=$EPOCHREALTIME
	line=${line%$'\r'}
	[ -z "${VERBOSE:-}" ] || printf '%6.2f %s\n' "$(awk -v a="$start" -v b="$now" 'BEGIN{print b-a}')" "$line" >&2
	if [ -z "$found" ] && [[ $line == *"$pattern"* ]]; then
		found=$(awk -v a="$start" -v b="$now" 'BEGIN{printf "%.2f", b-a}')
	fi
	case "$line" in "boot-test: qemu exited"*) echo "$line" >&2 ;; esac
done
stopped=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}')
if [ -n "$found" ]; then
	echo "boot-test: '$pattern' after ${found}s (qemu gone after ${stopped}s)"
	exit 0
fi
echo "boot-test: '$pattern' not seen (qemu gone after ${stopped}s)" >&2
exit 1
