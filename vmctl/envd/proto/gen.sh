#!/usr/bin/env bash
# Generates the Go code of envd's .proto files (`make proto`), or checks
# that the committed code is what they generate (`make proto-check`).
#
#   gen.sh          regenerate vmctl/envd/gen
#   gen.sh --check  generate into a temporary directory and compare
#
# protoc is Debian's protobuf-compiler (tests/host-setup.sh installs it);
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
