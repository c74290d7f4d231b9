package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// profileFlake lays out the resolver's fixture flake
// (vmctl/profile/testdata/fixture) in a new directory with the test image as
// its profile "test", and returns the directory.
func profileFlake(t *testing.T) string {
	t.Helper()
	testenv.RequireNix(t)
	dir := t.TempDir()
	testenv.CopyFile(t, filepath.Join("..", "..", "vmctl", "profile", "testdata", "fixture", "flake.nix"), filepath.Join(dir, "flake.nix"))
	img := testenv.Image(t)
	for _, f := range []string{"manifest.toml", "vmlinuz", "initrd.img", "rootfs.qcow2"} {
		testenv.CopyFile(t, filepath.Join(img, f), filepath.Join(dir, "images", "test", f))
	}
	return dir
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// agentbox runs the binary with args, its own state and runtime dirs (and
// the leak check after the test), the test's nix arguments, and no image,
// flake or config from the environment.
func agentbox(t *testing.T, args ...string) result {
	t.Helper()
	state, runtime := t.TempDir(), testenv.ShortTempDir(t)
	t.Cleanup(func() { testenv.AssertNoLeaks(t, state, runtime) })
	cmd := exec.Command(agentboxBin, append([]string{"--uri", testenv.URI(), "--state-dir", state, "--runtime-dir", runtime}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=", "AGENTBOX_IMAGE=", "AGENTBOX_FLAKE=", "AGENTBOX_NIX_ARGS="+testenv.NixArgs())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("agentbox: %v", err)
	}
	t.Logf("agentbox %s: exit %d, stderr: %.2000s", strings.Join(args, " "), code, stderr.Bytes())
	return result{stdout.Bytes(), stderr.Bytes(), code}
}

// TestProfile drives the profile commands and `run PROFILE` on a flake
// whose profile "test" is the test image, built for real by nix: lock,
// verify, boot it (plain and --locked), then change one byte of the image's
// manifest and watch `run --locked` and `verify` refuse it.
func TestProfile(t *testing.T) {
	t.Parallel()
	dir := profileFlake(t)
	flake := "path:" + dir
	lock := filepath.Join(dir, "agentbox.lock")
	digest := fileSHA256(t, filepath.Join(dir, "images", "test", "manifest.toml"))

	expect(t, agentbox(t, "--flake", flake, "profile", "ls"), 0, "NAME  LOCKED  IMAGE-SHA256\ntest  no      -\n", "")

	r := agentbox(t, "--flake", flake, "profile", "lock")
	m := regexp.MustCompile(`^locked test ([0-9a-f]{12}) (/nix/store/[a-z0-9]{32}-agentbox-image-test)\nwrote (.*)\n$`).FindStringSubmatch(string(r.stdout))
	if r.code != 0 || m == nil || m[1] != digest[:12] || m[3] != lock {
		t.Fatalf("profile lock: exit %d, stdout %q; want test locked at %s in %s", r.code, r.stdout, digest[:12], lock)
	}
	locked, err := os.ReadFile(lock)
	if err != nil || !bytes.Contains(locked, []byte(fmt.Sprintf("%q = %q", "manifest.toml", digest))) || !bytes.Contains(locked, []byte(`store_path = "`+m[2]+`"`)) {
		t.Fatalf("lock file %s: %v\n%s", lock, err, locked)
	}
	expect(t, agentbox(t, "--flake", flake, "profile", "ls"), 0, "NAME  LOCKED  IMAGE-SHA256\ntest  yes     "+digest[:12]+"\n", "")
	r = agentbox(t, "--flake", flake, "profile", "verify", "test")
	if r.code != 0 || string(r.stdout) != "verified test: the image matches "+lock+" and rebuilds byte for byte\n" {
		t.Fatalf("profile verify: exit %d, stdout %q", r.code, r.stdout)
	}

	// Boot the store copy; nix's progress stays off a redirected stderr.
	expect(t, agentbox(t, "run", "--local", "--accel", "tcg", "--flake", flake, "test", "--", "echo", "hi"), 0, "hi\n", "")
	expect(t, agentbox(t, "run", "--local", "--accel", "tcg", "--locked", "--flake", flake, "test", "--", "sh", "-c", "echo locked"), 0, "locked\n", "")

	// One byte of the manifest changed ("agentbox-test" → "agentbox-tesu"):
	// a valid image, but not the locked one.
	bad := t.TempDir()
	for _, f := range []string{"flake.nix", "agentbox.lock", "images/test/vmlinuz", "images/test/initrd.img", "images/test/rootfs.qcow2"} {
		testenv.CopyFile(t, filepath.Join(dir, f), filepath.Join(bad, f))
	}
	manifest, _ := os.ReadFile(filepath.Join(dir, "images", "test", "manifest.toml"))
	tampered := bytes.Replace(manifest, []byte(`name = "agentbox-test"`), []byte(`name = "agentbox-tesu"`), 1)
	if bytes.Equal(tampered, manifest) {
		t.Fatalf("the test image's manifest has no name = \"agentbox-test\":\n%s", manifest)
	}
	os.WriteFile(filepath.Join(bad, "images", "test", "manifest.toml"), tampered, 0o644)
	s := sha256.Sum256(tampered)
	want := fmt.Sprintf("manifest.toml has sha256 %s, the lock has %s", hex.EncodeToString(s[:]), digest)
	for _, args := range [][]string{
		{"run", "--local", "--accel", "tcg", "--locked", "--flake", "path:" + bad, "test", "--", "echo", "hi"},
		{"--flake", "path:" + bad, "profile", "verify", "test"},
	} {
		r := agentbox(t, args...)
		if r.code != 125 || len(r.stdout) != 0 || !bytes.Contains(r.stderr, []byte(want)) || !bytes.Contains(r.stderr, []byte("differs from "+filepath.Join(bad, "agentbox.lock"))) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125 and %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
}
