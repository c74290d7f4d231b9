#!/usr/bin/env bash
# Generates the Go code of envd's .proto files (`make proto`), or checks
# that the committed code is what they generate (`make proto-check`).
#
#   gen.sh          regenerate vmctl/envd/gen
#   gen.sh --check  generate into a temporary directory and compare
#
# protoc is Debian's protobuf-compiler, the well-known types it imports
# (google/protobuf/timestamp.proto) are libprotobuf-dev's, a Recommends
# that --no-install-recommends leaves out (tests/host-setup.sh installs
# both);
# the plugins protoc-gen-go and protoc-gen-connect-go are `tool` lines in
# go.mod, so their versions are pinned with the module's other
# dependencies and `go tool` builds them.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
cd "$repo"
command -v protoc >/dev/null || {
	echo "proto: protoc not found: run tests/host-setup.sh (installs protobuf-compiler)" >&2
	exit 1
}
# protoc finds the well-known types next to itself (…/include); say what
# to install rather than protoc's "File not found".
wkt=$(dirname "$(dirname "$(command -v protoc)")")/include/google/protobuf/timestamp.proto
[ -f "$wkt" ] || [ -f /usr/include/google/protobuf/timestamp.proto ] || {
	echo "proto: google/protobuf/timestamp.proto not found: install libprotobuf-dev (tests/host-setup.sh does)" >&2
	exit 1
}

gen() {
	local out=$1 go connect
	# go tool -n builds the plugin (cached) and prints its path.
	go=$(go tool -n protoc-gen-go)
	connect=$(go tool -n protoc-gen-connect-go)
	mkdir -p "$out"
	protoc -I vmctl/envd/proto \
		--plugin=protoc-gen-go="$go" --go_out="$out" --go_opt=paths=source_relative \
		--plugin=protoc-gen-connect-go="$connect" --connect-go_out="$out" --connect-go_opt=paths=source_relative \
		process/process.proto filesystem/filesystem.proto
}

case "${1:-}" in
"")
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	gen "$tmp"
	rm -rf vmctl/envd/gen
	mv "$tmp" vmctl/envd/gen
	chmod 755 vmctl/envd/gen
	;;
--check)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	gen "$tmp"
	if ! diff -ru vmctl/envd/gen "$tmp" >&2; then
		echo "proto-check: FAIL: vmctl/envd/gen is not what vmctl/envd/proto generates: run make proto" >&2
		exit 1
	fi
	echo "proto-check: vmctl/envd/gen is up to date" >&2
	;;
*)
	echo "usage: $0 [--check]" >&2
	exit 2
	;;
esac
