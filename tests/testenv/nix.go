package testenv

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// DefaultNixArgs are the extra nix arguments ($AGENTBOX_NIX_ARGS) of tests
// that build the resolver's fixture flake (vmctl/profile/testdata/fixture)
// with Debian's nix-bin, as root on a machine without Nix set up: offline
// (no substituters), without the nixbld group, in nix's build sandbox with
// Debian's static busybox as its only /bin/sh, and with identical files of
// the store hard-linked (auto-optimise-store), so copies of the ~150 MiB
// test image cost its size once.
const DefaultNixArgs = "--option substituters '' --option build-users-group '' " +
	"--option sandbox true --option extra-sandbox-paths /bin/sh=/bin/busybox " +
	"--option auto-optimise-store true"

// NixArgs returns $AGENTBOX_NIX_ARGS when it is set, else DefaultNixArgs.
func NixArgs() string {
	if v, ok := os.LookupEnv("AGENTBOX_NIX_ARGS"); ok {
		return v
	}
	return DefaultNixArgs
}

// RequireNix skips the test (fails it in strict mode) when nix is not on
// the PATH, or when DefaultNixArgs apply and /bin/busybox (Debian's
// busybox-static) is missing.
func RequireNix(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("nix"); err != nil {
		SkipOrFail(t, "nix is not installed (Debian: apt-get install nix-bin; tests/host-setup.sh does)")
	}
	if _, set := os.LookupEnv("AGENTBOX_NIX_ARGS"); !set {
		if _, err := os.Stat("/bin/busybox"); err != nil {
			SkipOrFail(t, "/bin/busybox is missing (Debian: apt-get install busybox-static): the fixture's builds use it as /bin/sh")
		}
	}
}

// CopyFile copies the regular file src to dst, a new file (mode 0644; its
// parent directories are created), failing the test on any error. The
// profile tests use it to put a real image into a fixture flake.
func CopyFile(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
