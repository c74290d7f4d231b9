package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// profileFlake writes the resolver's fixture flake (vmctl/profile/testdata)
// with one small image, profile tiny, into a new directory; disk is the
// image's qcow2 bytes (a header image.Load accepts). Same bytes give the
// same store paths, so reruns build nothing new.
func profileFlake(t *testing.T, disk []byte) string {
	t.Helper()
	testenv.RequireNix(t)
	dir := t.TempDir()
	flake, err := os.ReadFile(filepath.Join("..", "..", "vmctl", "profile", "testdata", "fixture", "flake.nix"))
	if err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(dir, "images", "tiny")
	os.MkdirAll(img, 0o755)
	files := map[string][]byte{"flake.nix": flake, "images/tiny/vmlinuz": []byte("cli kernel\n"), "images/tiny/initrd.img": []byte("cli initrd\n"), "images/tiny/rootfs.qcow2": disk}
	files["images/tiny/manifest.toml"] = []byte(fmt.Sprintf("format = 1\nname = \"cli\"\nkernel = \"vmlinuz\"\ninitrd = \"initrd.img\"\ndisk = \"rootfs.qcow2\"\n"+
		"cmdline = \"console=ttyS0\"\n[resources]\nvcpus = 1\nmemory_mib = 128\n[sha256]\nvmlinuz = %q\n\"initrd.img\" = %q\n\"rootfs.qcow2\" = %q\n",
		hexSum(files["images/tiny/vmlinuz"]), hexSum(files["images/tiny/initrd.img"]), hexSum(disk)))
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// qcow2Header is a qcow2 v3 header without a backing file.
func qcow2Header() []byte {
	b := make([]byte, 104)
	copy(b, "QFI\xfb")
	b[7] = 3
	return b
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestCLIProfiles drives `profile ls|lock|verify`, `create PROFILE` and
// `run PROFILE` (through a fake daemon) against a real nix build of the
// fixture flake.
func TestCLIProfiles(t *testing.T) {
	t.Setenv("AGENTBOX_NIX_ARGS", testenv.NixArgs())
	t.Setenv("AGENTBOX_FLAKE", "")
	d := startDaemon(t)
	good := profileFlake(t, qcow2Header())
	flake := "path:" + good
	lock := filepath.Join(good, "agentbox.lock") // the default for a local flake

	d.cli(t, nil, "--flake", flake, "profile", "ls").check(t, 0, "NAME  LOCKED  IMAGE-SHA256\ntiny  no      -\n", "")
	r := d.cli(t, nil, "--flake", flake, "profile", "lock")
	store := regexp.MustCompile(`^locked tiny ([0-9a-f]{12}) (/nix/store/[a-z0-9]{32}-agentbox-image-tiny)\nwrote (.*)\n$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || store == nil || store[3] != lock {
		t.Fatalf("profile lock: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	digest, tinyDir := store[1], store[2]
	if want := hexSum(mustRead(t, filepath.Join(tinyDir, "manifest.toml")))[:12]; digest != want {
		t.Fatalf("locked digest %s, want %s", digest, want)
	}
	// The flag on the subcommand works as well as the global one.
	d.cli(t, nil, "profile", "ls", "--flake", flake).check(t, 0, "NAME  LOCKED  IMAGE-SHA256\ntiny  yes     "+digest+"\n", "")
	r = d.cli(t, nil, "--flake", flake, "profile", "verify", "tiny")
	if r.code != 0 || r.stdout != "verified tiny: the image matches "+lock+" and rebuilds byte for byte\n" {
		t.Fatalf("profile verify: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}

	// create and run send the image's store path to the daemon.
	d.cli(t, nil, "create", "--flake", flake, "--locked", "tiny").check(t, 0, "000000abc001\n", "")
	d.cli(t, nil, "run", "--flake", flake, "tiny", "--", "out", "hi\n", "", "0").check(t, 0, "hi\n", "")
	if len(d.mem.Creates()) != 2 || d.mem.Creates()[0].Image != tinyDir || d.mem.Creates()[1].Image != tinyDir {
		t.Fatalf("create requests %+v, want image %s", d.mem.Creates(), tinyDir)
	}

	// One byte of the disk changed, the lock copied along: refused.
	disk := qcow2Header()
	disk[50]++
	bad := profileFlake(t, disk)
	os.WriteFile(filepath.Join(bad, "agentbox.lock"), mustRead(t, lock), 0o644)
	wantMsg := fmt.Sprintf("rootfs.qcow2 has sha256 %s, the lock has %s", hexSum(disk), hexSum(qcow2Header()))
	for _, args := range [][]string{
		{"run", "--locked", "--flake", "path:" + bad, "tiny", "--", "out", "", "", "0"},
		{"create", "--locked", "--flake", "path:" + bad, "tiny"},
		{"--flake", "path:" + bad, "profile", "verify"},
	} {
		r := d.cli(t, nil, args...)
		if r.code != 125 || r.stdout != "" || !strings.Contains(r.stderr, wantMsg) || !strings.Contains(r.stderr, "profile tiny: the image /nix/store/") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 125 naming rootfs.qcow2 and both hashes", args, r.code, r.stdout, r.stderr)
		}
	}
	if len(d.mem.Creates()) != 2 {
		t.Fatalf("a refused image reached the daemon: %+v", d.mem.Creates()[2:])
	}

	none := filepath.Join(t.TempDir(), "none.lock")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--flake", flake, "nope", "--", "true"}, `agentbox: unknown profile "nope": flake ` + flake + " has no profile nope for x86_64-linux (it has tiny): see `agentbox profile ls`\n"},
		{[]string{"run", "--image", "/img", "--locked", "--", "true"}, "agentbox: --locked checks a PROFILE against the lock file, not --image DIR: use `agentbox run [FLAGS] PROFILE -- COMMAND [ARG...]`\n"},
		{[]string{"run", "tiny", "true"}, "agentbox: no image: pass --image DIR (or set AGENTBOX_IMAGE), or a profile of the flake: `agentbox run [FLAGS] PROFILE -- COMMAND [ARG...]` (see `agentbox profile ls`); `make test-image` builds an image\n"},
		{[]string{"run", "--flake", flake, "tiny", "--"}, "agentbox: no command given: use `agentbox run tiny -- COMMAND [ARG...]`\n"},
		{[]string{"create", "--flake", flake, "tiny", "extra"}, "agentbox: want 1 argument(s), got 2: usage: agentbox create [FLAGS] --image DIR  |  agentbox create [FLAGS] PROFILE\n"},
		{[]string{"--flake", flake, "--lock", none, "profile", "verify"}, "agentbox: " + none + " does not exist: run `agentbox profile lock` first (or pass --lock FILE)\n"},
	} {
		r := d.cli(t, nil, tc.args...)
		if r.code != 125 || r.stderr != tc.want {
			t.Errorf("%q: exit %d, stderr %q; want 125 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}

	// Without nix on the PATH: what to install, or --image.
	t.Setenv("PATH", t.TempDir())
	d.cli(t, nil, "run", "--flake", flake, "tiny", "--", "true").
		check(t, 125, "", "agentbox: build profile tiny: nix not found in PATH: install Nix (https://nixos.org/download) or pass --image DIR\n")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
