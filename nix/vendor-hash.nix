# vendorHash of buildGoModule for agentbox and agentbox-guest: the NAR hash
# (SRI sha256) of the `vendor/` directory that `go mod vendor` writes for the
# source of ./source.nix. tests/nix/check-vendor-hash.sh recomputes it (and
# rewrites this file with --update) whenever go.mod, go.sum or an import changes.
"sha256-WLgwARnhqIfgV3nm8OOKcNuMxoRph737UtAcB8zEPNg="
