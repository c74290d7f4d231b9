// Package nix tests the Nix side of agentbox that this host can run without
// nixpkgs: the image builder nix/make-image.sh, which
// legacyPackages.<system>.images.<profile> runs inside a Nix build, runs
// here with Debian's e2fsprogs and qemu-img on a small fake closure. The
// tests prove that two builds from trees that differ only in what a build
// host may change (owners, times, hard links, xattrs, creation order) give
// the same bytes, that every inode is normalised, and that vmctl/image
// accepts the result. tests/nix/check.sh runs them (make nix-check).
package nix

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/image"
)

// sourceDateEpoch is the SOURCE_DATE_EPOCH of the test builds:
// 2024-01-01T00:00:00Z, 0x65920080.
const sourceDateEpoch = 1704067200

// storeFile is one entry of the fake closure, relative to the store.
type storeFile struct {
	path string
	mode os.FileMode // 0 for a symlink
	data string      // contents, or the symlink target
}

// fakeStore lists the fake closure's store paths and their files, in the
// order variant A creates them.
var fakeStore = []storeFile{
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-tools/bin/hello", 0o555, "#!/bin/sh\necho hello\n"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-tools/bin/hello-again", 0o555, "#!/bin/sh\necho hello\n"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-tools/lib", 0, "../bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-data/lib"},
	{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-tools/share/doc/README", 0o444, "tools\n"},
	{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-data/lib/table.csv", 0o444, strings.Repeat("a,b,c\n", 5000)},
	{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-data/lib/zeros", 0o444, string(make([]byte, 3*65536))},
	{"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-data/lib/empty", 0o444, ""},
}

// variant says how a fake closure is prepared.
type variant struct {
	reverse  bool        // create files in reverse order
	hardlink bool        // hello-again is a hard link of hello (needs !reverse)
	owner    int         // chown everything to this uid/gid (-1: leave)
	mtime    time.Time   // atime and mtime of every file
	xattr    bool        // set user.agentbox on table.csv
	dirMode  os.FileMode // mode of the store path directories
}

// fakeClosure writes the fake store under dir/store and a closureInfo
// directory (store-paths, total-nar-size) under dir/closure, and returns
// the closureInfo directory.
func fakeClosure(t *testing.T, dir string, v variant) string {
	t.Helper()
	store := filepath.Join(dir, "store")
	// Read-only directories would defeat t.TempDir's cleanup for non-root.
	t.Cleanup(func() {
		filepath.Walk(store, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	files := append([]storeFile(nil), fakeStore...)
	if v.reverse {
		for i, j := 0, len(files)-1; i < j; i, j = i+1, j-1 {
			files[i], files[j] = files[j], files[i]
		}
	}
	for _, f := range files {
		p := filepath.Join(store, f.path)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		switch {
		case f.mode == 0:
			must(t, os.Symlink(f.data, p))
		case v.hardlink && strings.HasSuffix(f.path, "/hello-again"):
			must(t, os.Link(filepath.Join(filepath.Dir(p), "hello"), p))
		default:
			must(t, os.WriteFile(p, []byte(f.data), 0o644))
		}
	}
	if v.xattr {
		err := unix.Setxattr(filepath.Join(store, fakeStore[4].path), "user.agentbox", []byte("1"), 0)
		if err != nil && !errors.Is(err, unix.ENOTSUP) {
			t.Fatal(err)
		}
	}
	var paths []string
	entries, err := os.ReadDir(store)
	must(t, err)
	for _, e := range entries {
		paths = append(paths, filepath.Join(store, e.Name()))
	}
	// Modes, owners and times last: writing into a directory changes its mtime.
	must(t, filepath.Walk(store, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if v.owner >= 0 {
			if err := os.Lchown(p, v.owner, v.owner); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, f := range fakeStore {
		if f.mode != 0 {
			must(t, os.Chmod(filepath.Join(store, f.path), f.mode))
		}
	}
	for _, p := range paths {
		must(t, filepath.Walk(p, func(q string, fi os.FileInfo, err error) error {
			if err == nil && fi.IsDir() {
				err = os.Chmod(q, v.dirMode)
			}
			return err
		}))
	}
	must(t, filepath.Walk(store, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		ts := []unix.Timespec{unix.NsecToTimespec(v.mtime.UnixNano()), unix.NsecToTimespec(v.mtime.UnixNano())}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	}))
	closure := filepath.Join(dir, "closure")
	must(t, os.MkdirAll(closure, 0o755))
	must(t, os.WriteFile(filepath.Join(closure, "store-paths"), []byte(strings.Join(paths, "\n")+"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(closure, "total-nar-size"), []byte("123456\n"), 0o644))
	return closure
}

// build runs nix/make-image.sh on closure into out with the test's inputs.
func build(t *testing.T, closure, out string) {
	t.Helper()
	boot := filepath.Join(filepath.Dir(out), "boot-"+filepath.Base(out))
	must(t, os.MkdirAll(boot, 0o755))
	kernel, initrd := filepath.Join(boot, "bzImage"), filepath.Join(boot, "initrd")
	must(t, os.WriteFile(kernel, []byte("not really a kernel\n"), 0o644))
	must(t, os.WriteFile(initrd, []byte("not really an initrd\n"), 0o644))
	cmd := exec.Command("bash", filepath.Join(repoRoot(t), "nix", "make-image.sh"), out)
	cmd.Env = append(os.Environ(),
		"closureInfo="+closure,
		"kernel="+kernel,
		"initrd="+initrd,
		"imageName=agentbox-test \"quoted\"",
		"cmdline=init=/nix/store/cccccccccccccccccccccccccccccccc-nixos-system/init root=/dev/vda rw console=ttyS0 panic=-1",
		"kernelVersion=6.12.0",
		"agentPort=org.agentbox.agent.0",
		"vcpus=2",
		"memoryMiB=768",
		"networkPolicy=allowlist",
		"networkAllow=api.example.com\nhost:5432\n198.51.100.0/24:8080",
		"extraSpaceMiB=16",
		"fsUUID=6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0101",
		"fsHashSeed=6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0102",
		"fsLabel=agentbox-root",
		fmt.Sprintf("SOURCE_DATE_EPOCH=%d", sourceDateEpoch),
		"TMPDIR="+t.TempDir(),
	)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("make-image.sh: %v\n%s", err, stderr.String())
	}
}

func TestImageBuilderIsReproducible(t *testing.T) {
	for _, tool := range []string{"mke2fs", "debugfs", "dumpe2fs", "e2fsck", "qemu-img", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.SkipOrFail(t, "%s not found: install e2fsprogs and qemu-utils (tests/host-setup.sh)", tool)
		}
	}
	dir := t.TempDir()
	owner := -1
	if os.Geteuid() == 0 {
		owner = 4242
	}
	closureA := fakeClosure(t, filepath.Join(dir, "a"), variant{
		hardlink: true, owner: -1, mtime: time.Unix(1, 0), dirMode: 0o555,
	})
	closureB := fakeClosure(t, filepath.Join(dir, "b"), variant{
		reverse: true, owner: owner, mtime: time.Date(2030, 5, 6, 7, 8, 9, 123456789, time.UTC),
		xattr: true, dirMode: 0o555,
	})
	outA, outB := filepath.Join(dir, "outA"), filepath.Join(dir, "outB")
	build(t, closureA, outA)
	build(t, closureB, outB)

	files := []string{"manifest.toml", "vmlinuz", "initrd.img", "rootfs.qcow2"}
	for _, f := range files {
		a, b := sha256File(t, filepath.Join(outA, f)), sha256File(t, filepath.Join(outB, f))
		if a != b {
			t.Errorf("%s differs between the two builds: %s vs %s", f, a, b)
		}
	}
	entries, err := os.ReadDir(outA)
	must(t, err)
	if len(entries) != len(files) {
		t.Errorf("image directory has %d entries, want exactly %v", len(entries), files)
	}

	// The contract: vmctl/image loads it as agentbox run --image does.
	img, err := image.Load(context.Background(), outA, image.LoadOptions{})
	if err != nil {
		t.Fatalf("vmctl/image rejects the image: %v", err)
	}
	m := img.Manifest
	if m.Name != `agentbox-test "quoted"` || m.AgentPort != "org.agentbox.agent.0" || m.KernelVersion != "6.12.0" ||
		m.Resources.VCPUs != 2 || m.Resources.MemoryMiB != 768 ||
		m.Cmdline != "init=/nix/store/cccccccccccccccccccccccccccccccc-nixos-system/init root=/dev/vda rw console=ttyS0 panic=-1" {
		t.Errorf("manifest = %+v", m)
	}
	if got := m.DefaultNetwork(); got.Mode != "allowlist" || strings.Join(got.Strings(), " ") != "api.example.com host:5432 198.51.100.0/24:8080" {
		t.Errorf("manifest default network = %v %q, want allowlist [api.example.com host:5432 198.51.100.0/24:8080]", got.Mode, got.Strings())
	}

	// Every inode normalised: root-owned, times fixed, no hard link left.
	raw := filepath.Join(dir, "rootfs.raw")
	run(t, "qemu-img", "convert", "-f", "qcow2", "-O", "raw", filepath.Join(outA, "rootfs.qcow2"), raw)
	run(t, "e2fsck", "-f", "-n", raw)
	epoch := fmt.Sprintf("0x%08x:00000000", sourceDateEpoch)
	for _, f := range fakeStore {
		p := "/nix/store/" + f.path
		st := run(t, "debugfs", "-R", "stat "+p, raw)
		want := map[string]string{
			"User":   `User:\s+0\s+Group:\s+0\s`,
			"ctime":  `ctime: ` + epoch,
			"atime":  `atime: ` + epoch,
			"crtime": `crtime: ` + epoch,
			"mtime":  `mtime: 0x00000001:00000000`,
			"Links":  `Links: 1\s`,
		}
		for field, re := range want {
			if !regexp.MustCompile(re).MatchString(st) {
				t.Errorf("%s: %s not normalised (want /%s/):\n%s", p, field, re, st)
			}
		}
		if f.mode != 0 && !strings.Contains(st, fmt.Sprintf("Mode:  %04o", f.mode)) {
			t.Errorf("%s: mode is not %04o:\n%s", p, f.mode, st)
		}
	}
	if got := run(t, "debugfs", "-R", "cat /nix/store/"+fakeStore[4].path, raw); got != fakeStore[4].data {
		t.Errorf("table.csv in the image has %d bytes, want %d", len(got), len(fakeStore[4].data))
	}
	sb := run(t, "dumpe2fs", "-h", raw)
	for _, re := range []string{
		`Filesystem UUID:\s+6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0101`,
		`Directory Hash Seed:\s+6a0b0c5e-a9e1-4b1f-9a3c-0b0e0a9e0102`,
		`Filesystem volume name:\s+agentbox-root`,
		`Filesystem features:\s+has_journal ext_attr resize_inode dir_index filetype extent 64bit flex_bg sparse_super large_file huge_file dir_nlink extra_isize metadata_csum\n`,
	} {
		if !regexp.MustCompile(re).MatchString(sb) {
			t.Errorf("superblock does not match /%s/:\n%s", re, sb)
		}
	}
}

// run runs a command and returns its stdout; it fails the test on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
