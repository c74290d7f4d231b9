#!/usr/bin/env bash
# Recomputes the vendorHash of the flake's Go packages and compares it with
# nix/vendor-hash.nix.
#
# Usage: tests/nix/check-vendor-hash.sh [--update]
#
# buildGoModule fetches the modules in a fixed-output derivation that runs
# `go mod vendor` in the package source and whose output is the resulting
# vendor/ directory; vendorHash is that directory's NAR hash (SRI sha256).
# This script does the same offline: it copies the files nix/source.nix
# selects (go.mod, go.sum, cmd/, vmctl/, the .go files under tests/; git's
# tracked and untracked-but-not-ignored files, what a commit would hold) to a
# temporary directory, runs `go mod vendor` there from the module cache
# (GOPROXY=off) and hashes the result with `nix hash path`. --update writes
# the new hash into nix/vendor-hash.nix.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
hashfile=$repo/nix/vendor-hash.nix
update=0
case "${1:-}" in
'') ;;
--update) update=1 ;;
*)
	sed -n '2,4p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
	exit 2
	;;
esac

die() {
	echo "check-vendor-hash: $*" >&2
	exit 1
}
command -v go >/dev/null || die "go not found (Go >= 1.25)"
command -v nix >/dev/null || die "nix not found: install nix-bin (tests/host-setup.sh does)"
nixopts=(--extra-experimental-features nix-command)
# As root without Nix's build users (Debian's nix-bin on a CI machine).
if [ "$(id -u)" = 0 ] && ! getent group nixbld >/dev/null; then
	nixopts+=(--option build-users-group '')
fi

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
mkdir "$work/src"

cd "$repo"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	{
		git ls-files -z -co --exclude-standard -- go.mod go.sum cmd vmctl
		git ls-files -z -co --exclude-standard -- 'tests/*.go'
	} | xargs -0 cp --parents -t "$work/src"
else
	{ printf '%s\0' go.mod go.sum; find cmd vmctl -type f -print0; find tests -type f -name '*.go' -print0; } |
		xargs -0 cp --parents -t "$work/src"
fi

(
	cd "$work/src"
	env GOFLAGS= GOWORK=off GOTOOLCHAIN=local GOPROXY="${GOPROXY_VENDOR_CHECK:-off}" \
		go mod vendor -o "$work/vendor"
) || die "go mod vendor failed (above). With GOPROXY=off every module must be in the module cache: run \`go mod download\` once (needs the network), or set GOPROXY_VENDOR_CHECK to the Go module proxy's URL"

actual=$(nix "${nixopts[@]}" hash path --type sha256 --sri "$work/vendor")
expected=$(grep -o 'sha256-[A-Za-z0-9+/=]*' "$hashfile" | head -n1 || true)
[ -n "$expected" ] || die "no sha256-... hash in $hashfile"

if [ "$actual" = "$expected" ]; then
	echo "check-vendor-hash: vendorHash $actual matches ($(go env GOVERSION))" >&2
	exit 0
fi
if [ "$update" = 1 ]; then
	sed -i "s|$expected|$actual|" "$hashfile"
	echo "check-vendor-hash: nix/vendor-hash.nix updated: $expected -> $actual; commit it" >&2
	exit 0
fi
cat >&2 <<EOF
check-vendor-hash: nix/vendor-hash.nix is out of date: the Go dependencies changed.
  expected (nix/vendor-hash.nix):         $expected
  actual   (go mod vendor, $(go env GOVERSION)): $actual
Update it with:  tests/nix/check-vendor-hash.sh --update   and commit nix/vendor-hash.nix.
(A Nix build reports the same mismatch as "hash mismatch in fixed-output derivation
…-go-modules … got: sha256-…"; if the hash Nix reports differs from the one above, its Go
vendored differently: see "Go vendor hash" in docs/nix.md.)
EOF
exit 1
