# The Go source both packages build from: go.mod, go.sum, cmd/, vmctl/ and the
# .go files under tests/ (tests of vmctl import tests/testenv, and `go mod
# vendor` follows the imports of every test of the module, so the vendor hash
# depends on them). Nothing else: editing the README, the Nix files or the
# profiles does not rebuild agentbox. tests/nix/check-vendor-hash.sh copies
# exactly this set.
{ lib }:

let
  fs = lib.fileset;
in
fs.toSource {
  root = ../.;
  fileset = fs.unions [
    ../go.mod
    ../go.sum
    ../cmd
    ../vmctl
    (fs.fileFilter (file: lib.hasSuffix ".go" file.name) ../tests)
  ];
}
