// Package testenv holds what agentbox's guest-booting tests share: where the
// test image is, short scratch directories for unix sockets, and the check
// that a test left no domain, qemu process, overlay or socket behind. It
// also holds the one wait of every test package, guest-booting or not
// (WaitFor, Receive), and imports nothing of agentbox, so any _test.go file
// may import it.
//
// Environment variables read (see tests/README.md):
//
//	AGENTBOX_TEST_IMAGE  image directory built by `make test-image` (required)
//	AGENTBOX_TEST_URI    libvirt URI (default qemu:///system)
package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Image returns the test image directory from AGENTBOX_TEST_IMAGE. A missing
// image fails the test (never a skip): guest tests are the point.
func Image(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("AGENTBOX_TEST_IMAGE")
	if dir == "" {
		t.Fatal("AGENTBOX_TEST_IMAGE is not set: run `make test`, or export AGENTBOX_TEST_IMAGE=\"$(make -s test-image | tail -n1)\"")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.toml")); err != nil {
		t.Fatalf("AGENTBOX_TEST_IMAGE=%s: %v", dir, err)
	}
	return dir
}

// HostileImage returns the image of the hostile guest agent
// (AGENTBOX_TEST_HOSTILE_IMAGE: tests/image/build.sh with AGENT_TAGS=hostile,
// which `make test` builds), failing the test when it is not set.
func HostileImage(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("AGENTBOX_TEST_HOSTILE_IMAGE")
	if dir == "" {
		t.Fatal("AGENTBOX_TEST_HOSTILE_IMAGE is not set: run `make test`, or export AGENTBOX_TEST_HOSTILE_IMAGE=\"$(AGENT_TAGS=hostile tests/image/build.sh | tail -n1)\"")
	}
	if _, err := os.Stat(filepath.Join(dir, "manifest.toml")); err != nil {
		t.Fatalf("AGENTBOX_TEST_HOSTILE_IMAGE=%s: %v", dir, err)
	}
	return dir
}

// URI returns the libvirt URI tests use.
func URI() string {
	if u := os.Getenv("AGENTBOX_TEST_URI"); u != "" {
		return u
	}
	return "qemu:///system"
}

// ShortTempDir returns a new directory under /tmp with a short name, removed
// after the test: t.TempDir() paths can exceed the 107-byte limit of a unix
// socket path.
func ShortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "ab")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// AssertNoLeaks fails the test if a qemu process still runs whose command
// line mentions one of dirs (a leaked domain), or if any of dirs still holds
// a sandbox directory, overlay or socket. Tests give every sandbox its own
// state and runtime dirs, so this is exact even when tests run in parallel.
func AssertNoLeaks(t testing.TB, stateDir, runtimeDir string) {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(cmd, []byte("qemu-system")) {
			continue
		}
		for _, d := range []string{stateDir, runtimeDir} {
			if d != "" && bytes.Contains(cmd, []byte(d)) {
				t.Errorf("leaked qemu process %s: %s", filepath.Base(filepath.Dir(p)), strings.ReplaceAll(string(cmd), "\x00", " ")[:200])
			}
		}
	}
	if stateDir != "" {
		left, _ := filepath.Glob(filepath.Join(stateDir, "sandboxes", "*"))
		if len(left) > 0 {
			t.Errorf("leaked sandbox dirs (overlays): %v", left)
		}
		// In-process runs keep their state in STATE/local/RUN-ID.
		left, _ = filepath.Glob(filepath.Join(stateDir, "local", "*"))
		if len(left) > 0 {
			t.Errorf("leaked in-process run dirs (overlays, stores): %v", left)
		}
	}
	if runtimeDir != "" {
		left, _ := filepath.Glob(filepath.Join(runtimeDir, "*"))
		if len(left) > 0 {
			t.Errorf("leaked runtime files (sockets): %v", left)
		}
	}
}

// StrictEnv names the variable that turns every capability skip into a
// failure. `make test` and CI set it, so a missing install step can never
// pass as a skipped test.
const StrictEnv = "AGENTBOX_TEST_STRICT"

// Strict reports whether skips are failures: AGENTBOX_TEST_STRICT=1 or CI set.
func Strict() bool { return os.Getenv(StrictEnv) != "" || os.Getenv("CI") != "" }

// SkipOrFail skips the test for a missing host capability, with the reason,
// or fails it when Strict().
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Strict() {
		t.Fatalf(format+" (skips are failures: %s or CI is set)", append(args, StrictEnv)...)
	}
	t.Skipf(format, args...)
}
