package profile

// Tests against the real nix (Debian's nix-bin): the fixture flake in
// testdata/fixture, copied with image directories into scratch dirs and
// built offline. Same content gives the same store paths, so reruns build
// nothing new and the store holds each fixture variant once.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
	"github.com/agentbox/agentbox/vmctl/image"
)

// scratch holds the fixture copies shared by the tests of this binary.
var scratch string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "agentbox-profile-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	scratch = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	fixtureMu sync.Mutex
	fixtures  = map[string]string{}
)

// fixture returns scratch/name, made once per test binary by make (which
// gets the empty directory holding flake.nix).
func fixture(t *testing.T, name string, make func(t *testing.T, dir string)) string {
	t.Helper()
	testenv.RequireNix(t)
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	if dir, ok := fixtures[name]; ok {
		return dir
	}
	dir := filepath.Join(scratch, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.CopyFile(t, filepath.Join("testdata", "fixture", "flake.nix"), filepath.Join(dir, "flake.nix"))
	make(t, dir)
	fixtures[name] = dir
	return dir
}

// smallFixture is the flake with profiles base and tiny, two small images.
func smallFixture(t *testing.T) string {
	return fixture(t, "small", func(t *testing.T, dir string) {
		writeTiny(t, filepath.Join(dir, "images", "base"), "base")
		writeTiny(t, filepath.Join(dir, "images", "tiny"), "tiny")
	})
}

// realFixture is the flake with profile test, the real test image
// (AGENTBOX_TEST_IMAGE).
func realFixture(t *testing.T) string {
	return fixture(t, "real", func(t *testing.T, dir string) {
		src := testenv.Image(t)
		for _, f := range []string{"manifest.toml", "vmlinuz", "initrd.img", "rootfs.qcow2"} {
			testenv.CopyFile(t, filepath.Join(src, f), filepath.Join(dir, "images", "test", f))
		}
	})
}

// failingFixture is the flake with profiles broken and random.
func failingFixture(t *testing.T) string {
	return fixture(t, "failing", func(t *testing.T, dir string) {
		os.WriteFile(filepath.Join(dir, "broken"), nil, 0o644)
		os.WriteFile(filepath.Join(dir, "random"), nil, 0o644)
	})
}

// tampered returns a copy of the fixture flake good with byte off of file
// (a path in the flake, e.g. "images/tiny/rootfs.qcow2") incremented by
// one.
func tampered(t *testing.T, good, file string, off int) string {
	return fixture(t, "tampered-"+strings.ReplaceAll(file, "/", "-"), func(t *testing.T, dir string) {
		err := filepath.WalkDir(filepath.Join(good, "images"), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(good, path)
			testenv.CopyFile(t, path, filepath.Join(dir, rel))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, file)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data[off]++
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	})
}

// writeTiny writes a minimal valid image named name into dir: two small
// files and a qcow2 v3 header without a backing file, which image.Load
// accepts.
func writeTiny(t *testing.T, dir, name string) {
	t.Helper()
	qcow2 := make([]byte, 104)
	copy(qcow2, "QFI\xfb")
	qcow2[7] = 3
	files := map[string][]byte{"vmlinuz": []byte(name + " kernel\n"), "initrd.img": []byte(name + " initrd\n"), "rootfs.qcow2": qcow2}
	manifest := fmt.Sprintf(`format = 1
name = %q
kernel = "vmlinuz"
initrd = "initrd.img"
disk = "rootfs.qcow2"
cmdline = "console=ttyS0 root=/dev/vda rw panic=-1"
[resources]
vcpus = 1
memory_mib = 128
[sha256]
vmlinuz = %q
"initrd.img" = %q
"rootfs.qcow2" = %q
`, name, sum(files["vmlinuz"]), sum(files["initrd.img"]), sum(files["rootfs.qcow2"]))
	files["manifest.toml"] = []byte(manifest)
	os.MkdirAll(dir, 0o755)
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func fileSum(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum(data)
}

// logWriter passes nix's progress to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Logf("nix: %s", bytes.TrimRight(p, "\n"))
	return len(p), nil
}

// resolver returns a Resolver of the flake in dir for x86_64-linux (the
// fixture's builds need a host of that system) with lock file lock.
func resolver(t *testing.T, dir, lock string) *Resolver {
	t.Helper()
	args, err := SplitArgs(testenv.NixArgs())
	if err != nil {
		t.Fatal(err)
	}
	sys, err := SystemFor(runtimeGOARCH)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Options{Flake: "path:" + dir, System: sys, LockFile: lock, NixArgs: args, Progress: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestNixList(t *testing.T) {
	t.Parallel()
	r := resolver(t, smallFixture(t), "")
	names, err := r.List(context.Background())
	if err != nil || !reflect.DeepEqual(names, []string{"base", "tiny"}) {
		t.Fatalf("List = %q, %v; want [base tiny]", names, err)
	}
	// A system the flake has no images for.
	other, _ := New(Options{Flake: r.Flake(), System: "riscv64-linux", NixArgs: r.nixArgs})
	if _, err := other.List(context.Background()); !errors.Is(err, ErrNoImages) || !strings.Contains(err.Error(), "has no legacyPackages.riscv64-linux.images") {
		t.Fatalf("List for riscv64-linux: %v, want ErrNoImages", err)
	}
}

func TestNixResolve(t *testing.T) {
	t.Parallel()
	dir := smallFixture(t)
	r := resolver(t, dir, "")
	ctx := context.Background()
	for _, name := range []string{"base", "tiny"} {
		out, err := r.Resolve(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out, "/nix/store/") || !strings.HasSuffix(out, "-agentbox-image-"+name) {
			t.Fatalf("Resolve(%s) = %s, want a store path named agentbox-image-%s", name, out, name)
		}
		img, err := image.Load(ctx, out, image.LoadOptions{})
		if err != nil {
			t.Fatalf("image.Load(%s): %v", out, err)
		}
		if want := fileSum(t, filepath.Join(dir, "images", name, "manifest.toml")); img.Digest != want || img.Manifest.Name != name {
			t.Fatalf("%s: image %q with manifest digest %s, want the fixture's %s", name, img.Manifest.Name, img.Digest, want)
		}
		again, err := r.Resolve(ctx, name)
		if err != nil || again != out {
			t.Fatalf("second Resolve(%s) = %s, %v; want %s", name, again, err, out)
		}
	}
}

// lockEntry is the lock file's text for profile name on system, locked
// from store path out whose files are those of the image directory src.
func lockEntry(t *testing.T, name, system, out, src string) string {
	s := fmt.Sprintf("\n[profiles.%s.%s]\nstore_path = %q\nnixpkgs_rev = \"\"\nnixpkgs_nar_hash = \"\"\n\n[profiles.%s.%s.sha256]\n", name, system, out, name, system)
	for _, f := range []string{"initrd.img", "manifest.toml", "rootfs.qcow2", "vmlinuz"} {
		key := f
		if strings.Contains(f, ".") {
			key = fmt.Sprintf("%q", f)
		}
		s += fmt.Sprintf("%s = %q\n", key, fileSum(t, filepath.Join(src, f)))
	}
	return s
}

func TestNixLockVerify(t *testing.T) {
	t.Parallel()
	dir := smallFixture(t)
	lock := filepath.Join(t.TempDir(), "agentbox.lock")
	r := resolver(t, dir, lock)
	ctx := context.Background()
	// Entries of another system are kept; this system's entry of a
	// profile the flake no longer has is dropped by locking all.
	zero := map[string]string{"manifest.toml": strings.Repeat("0", 64)}
	seed := &LockFile{Version: LockVersion}
	seed.set("tiny", "aarch64-linux", LockedImage{StorePath: "/nix/store/other", SHA256: zero})
	seed.set("gone", r.System(), LockedImage{StorePath: "/nix/store/gone", SHA256: zero})
	if err := seed.WriteFile(lock); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Lock(ctx, nil); err != nil {
		t.Fatal(err)
	}
	baseDir, _ := r.Resolve(ctx, "base")
	tinyDir, _ := r.Resolve(ctx, "tiny")
	want := lockHeader + "version = 1\n" +
		lockEntry(t, "base", r.System(), baseDir, filepath.Join(dir, "images", "base")) +
		"\n[profiles.tiny.aarch64-linux]\nstore_path = \"/nix/store/other\"\nnixpkgs_rev = \"\"\nnixpkgs_nar_hash = \"\"\n\n" +
		"[profiles.tiny.aarch64-linux.sha256]\n\"manifest.toml\" = \"" + strings.Repeat("0", 64) + "\"\n" +
		lockEntry(t, "tiny", r.System(), tinyDir, filepath.Join(dir, "images", "tiny"))
	got, _ := os.ReadFile(lock)
	if string(got) != want {
		t.Fatalf("lock file:\n%s\nwant:\n%s", got, want)
	}
	// Locking again, all or some, writes the same bytes.
	for _, names := range [][]string{nil, {"tiny"}, {"base", "tiny"}} {
		if _, err := r.Lock(ctx, names); err != nil {
			t.Fatal(err)
		}
		if again, _ := os.ReadFile(lock); !bytes.Equal(again, got) {
			t.Fatalf("Lock(%q) changed the file:\n%s", names, again)
		}
	}
	for name, want := range map[string]string{"base": baseDir, "tiny": tinyDir} {
		if out, err := r.Verify(ctx, name); err != nil || out != want {
			t.Fatalf("Verify(%s) = %s, %v; want %s", name, out, err, want)
		}
		if out, err := r.ResolveLocked(ctx, name); err != nil || out != want {
			t.Fatalf("ResolveLocked(%s) = %s, %v; want %s", name, out, err, want)
		}
	}
}

// checkMismatch asserts that Verify and ResolveLocked of profile on the
// flake in dir, with lock file lock, fail naming file (of the image
// directory images/PROFILE in the flake) with its new and its locked
// sha256, and returns the image directory built.
func checkMismatch(t *testing.T, dir, lock, profile, file string) string {
	t.Helper()
	r := resolver(t, dir, lock)
	ctx := context.Background()
	lf, err := ReadLockFile(lock)
	if err != nil {
		t.Fatal(err)
	}
	li, _ := lf.Get(profile, r.System())
	got := fileSum(t, filepath.Join(dir, "images", profile, file))
	if got == li.SHA256[file] || li.SHA256[file] == "" {
		t.Fatalf("%s: sha256 %s, locked %q: tampering changed nothing", file, got, li.SHA256[file])
	}
	wantMsg := fmt.Sprintf("%s has sha256 %s, the lock has %s", file, got, li.SHA256[file])
	var built string
	for _, fn := range []string{"Verify", "ResolveLocked"} {
		call := map[string]func(context.Context, string) (string, error){"Verify": r.Verify, "ResolveLocked": r.ResolveLocked}[fn]
		out, err := call(ctx, profile)
		var me *MismatchError
		if out != "" || !errors.As(err, &me) || !errors.Is(err, ErrMismatch) {
			t.Fatalf("%s = %q, %v; want a *MismatchError", fn, out, err)
		}
		if built == "" {
			built = me.Dir
		}
		want := &MismatchError{Profile: profile, Dir: built, LockFile: lock, Files: []FileMismatch{{Name: file, Got: got, Locked: li.SHA256[file]}}}
		if !strings.HasPrefix(built, "/nix/store/") || !reflect.DeepEqual(me, want) || !strings.Contains(err.Error(), wantMsg) {
			t.Fatalf("%s: %v\nwant %+v", fn, err, want)
		}
	}
	return built
}

func TestNixTampered(t *testing.T) {
	t.Parallel()
	good := smallFixture(t)
	lock := filepath.Join(t.TempDir(), "agentbox.lock")
	if _, err := resolver(t, good, lock).Lock(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// One byte of the disk: the image no longer matches its own manifest
	// either, but the lock check names it first.
	checkMismatch(t, tampered(t, good, "images/tiny/rootfs.qcow2", 50), lock, "tiny", "rootfs.qcow2")
}

// TestNixRealImage resolves, locks and verifies the real test image, then
// changes one byte of its manifest ("agentbox-test" becomes
// "agentbox-tesu"): a valid image, which only the lock refuses.
func TestNixRealImage(t *testing.T) {
	t.Parallel()
	dir := realFixture(t)
	lock := filepath.Join(t.TempDir(), "agentbox.lock")
	r := resolver(t, dir, lock)
	ctx := context.Background()
	if _, err := r.Lock(ctx, []string{"test"}); err != nil {
		t.Fatal(err)
	}
	out, err := r.Verify(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	img, err := image.Load(ctx, out, image.LoadOptions{})
	if err != nil || img.Manifest.Name != "agentbox-test" {
		t.Fatalf("image.Load(%s): %v", out, err)
	}
	want := lockHeader + "version = 1\n" + lockEntry(t, "test", r.System(), out, filepath.Join(dir, "images", "test"))
	if got, _ := os.ReadFile(lock); string(got) != want {
		t.Fatalf("lock file:\n%s\nwant:\n%s", got, want)
	}

	manifest := readFile(t, filepath.Join(dir, "images", "test", "manifest.toml"))
	off := strings.Index(manifest, `name = "agentbox-test"`) + len(`name = "agentbox-tes`)
	built := checkMismatch(t, tampered(t, dir, "images/test/manifest.toml", off), lock, "test", "manifest.toml")
	if img, err := image.Load(ctx, built, image.LoadOptions{}); err != nil || img.Manifest.Name != "agentbox-tesu" {
		t.Fatalf("the tampered image should load (only the lock refuses it): %v", err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestNixNotLocked(t *testing.T) {
	t.Parallel()
	dir := smallFixture(t)
	ctx := context.Background()
	missing := filepath.Join(t.TempDir(), "agentbox.lock")
	_, err := resolver(t, dir, missing).ResolveLocked(ctx, "tiny")
	if !errors.Is(err, ErrNotLocked) || err.Error() != fmt.Sprintf("profile not locked: %s does not exist: run `agentbox profile lock` (or pass --lock FILE)", missing) {
		t.Fatalf("no lock file: %v", err)
	}
	partial := filepath.Join(t.TempDir(), "agentbox.lock")
	r := resolver(t, dir, partial)
	if _, err := r.Lock(ctx, []string{"tiny"}); err != nil {
		t.Fatal(err)
	}
	_, err = r.Verify(ctx, "base")
	if !errors.Is(err, ErrNotLocked) || !strings.Contains(err.Error(), "profile base is not in "+partial+" for x86_64-linux: run `agentbox profile lock base`") {
		t.Fatalf("profile not in the lock: %v", err)
	}
}

func TestNixMissing(t *testing.T) {
	dir := smallFixture(t)
	r := resolver(t, dir, "")
	t.Setenv("PATH", t.TempDir())
	want := "nix not found in PATH: install Nix (https://nixos.org/download) or pass --image DIR"
	if _, err := r.Resolve(context.Background(), "tiny"); !errors.Is(err, ErrNixNotFound) || err.Error() != "build profile tiny: "+want {
		t.Fatalf("Resolve: %v", err)
	}
	if _, err := r.List(context.Background()); !errors.Is(err, ErrNixNotFound) || err.Error() != "list the profiles of flake path:"+dir+": "+want {
		t.Fatalf("List: %v", err)
	}
}

func TestNixUnknownProfile(t *testing.T) {
	t.Parallel()
	dir := smallFixture(t)
	r := resolver(t, dir, "")
	_, err := r.Resolve(context.Background(), "nope")
	want := fmt.Sprintf(`unknown profile "nope": flake path:%s has no profile nope for x86_64-linux (it has base, tiny): see `+"`agentbox profile ls`", dir)
	if !errors.Is(err, ErrUnknownProfile) || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	// A name that is no Nix identifier never reaches nix.
	if _, err := r.Resolve(context.Background(), "a.b"); !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), "is a Nix identifier") {
		t.Fatalf("bad name: %v", err)
	}
}

func TestNixBuildFails(t *testing.T) {
	t.Parallel()
	r := resolver(t, failingFixture(t), "")
	_, err := r.Resolve(context.Background(), "broken")
	var ne *NixError
	if !errors.Is(err, ErrBuildFailed) || !errors.As(err, &ne) {
		t.Fatalf("err = %v, want ErrBuildFailed with a *NixError", err)
	}
	if ne.ExitCode != 1 || len(ne.Tail) != tailLines || !slices.Contains(ne.Tail, "agentbox-image-broken> log line 30") ||
		slices.Contains(ne.Tail, "agentbox-image-broken> log line 1") || !strings.Contains(err.Error(), "failed with exit code 3") {
		t.Fatalf("exit %d, tail %q", ne.ExitCode, ne.Tail)
	}
	if !strings.HasPrefix(err.Error(), "nix build failed: profile broken: `nix --extra-experimental-features 'nix-command flakes' build ") {
		t.Fatalf("message: %v", err)
	}
}

func TestNixNotReproducible(t *testing.T) {
	t.Parallel()
	dir := failingFixture(t)
	lock := filepath.Join(t.TempDir(), "agentbox.lock")
	r := resolver(t, dir, lock)
	ctx := context.Background()
	out, err := r.Resolve(ctx, "random")
	if err != nil {
		t.Fatal(err)
	}
	// Lock what the first build produced (not an image, so by hand).
	lf := &LockFile{Version: LockVersion}
	lf.set("random", r.System(), LockedImage{StorePath: out, SHA256: map[string]string{"manifest.toml": fileSum(t, filepath.Join(out, "manifest.toml"))}})
	if err := lf.WriteFile(lock); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ResolveLocked(ctx, "random"); err != nil || got != out {
		t.Fatalf("ResolveLocked = %s, %v", got, err)
	}
	_, err = r.Verify(ctx, "random")
	if !errors.Is(err, ErrNotReproducible) || !strings.Contains(err.Error(), "may not be deterministic") {
		t.Fatalf("Verify of a random build: %v, want ErrNotReproducible", err)
	}
}

// runtimeGOARCH is the architecture the fixture is built for.
const runtimeGOARCH = runtime.GOARCH
