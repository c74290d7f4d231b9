package image

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeQcow2 is a minimal qcow2 v3 header with no backing file.
func fakeQcow2() []byte {
	b := make([]byte, 104)
	copy(b, qcow2Magic)
	b[7] = 3
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// writeImage lays out a valid image in a new directory and returns it.
func writeImage(t *testing.T, mutate func(files map[string][]byte, manifest *string)) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{
		"vmlinuz":      []byte("kernel bytes"),
		"initrd.img":   []byte("initrd bytes"),
		"rootfs.qcow2": fakeQcow2(),
	}
	manifest := fmt.Sprintf(`format = 1
name = "test"
kernel = "vmlinuz"
initrd = "initrd.img"
disk = "rootfs.qcow2"
cmdline = "console=ttyS0 root=/dev/vda rw"
agent_port = "org.agentbox.agent.0"
kernel_version = "6.1.0-test"
[resources]
vcpus = 1
memory_mib = 256
[sha256]
vmlinuz = %q
"initrd.img" = %q
"rootfs.qcow2" = %q
`, sum(files["vmlinuz"]), sum(files["initrd.img"]), sum(files["rootfs.qcow2"]))
	if mutate != nil {
		mutate(files, &manifest)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLoadValid(t *testing.T) {
	dir := writeImage(t, nil)
	img, err := Load(context.Background(), dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img.Kernel != filepath.Join(dir, "vmlinuz") || img.Disk != filepath.Join(dir, "rootfs.qcow2") {
		t.Fatalf("paths: %+v", img)
	}
	if img.Manifest.Resources.MemoryMiB != 256 || img.Manifest.AgentPort != "org.agentbox.agent.0" {
		t.Fatalf("manifest: %+v", img.Manifest)
	}
	if len(img.Digest) != 64 {
		t.Fatalf("digest %q", img.Digest)
	}
	if p := img.Manifest.DefaultNetwork(); p.Mode != "none" || len(p.Allow) != 0 {
		t.Fatalf("default network without [network] = %+v, want mode none", p)
	}
}

func TestManifestNetwork(t *testing.T) {
	dir := writeImage(t, func(f map[string][]byte, m *string) {
		*m = strings.Replace(*m, "[sha256]", "[network]\npolicy = \"allowlist\"\nallow = [\"api.example.com\", \"host:5432\"]\n[sha256]", 1)
	})
	img, err := Load(context.Background(), dir, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := img.Manifest.DefaultNetwork()
	if p.Mode != "allowlist" || strings.Join(p.Strings(), " ") != "api.example.com host:5432" || p.DNS != "" {
		t.Fatalf("default network = %v %q, want allowlist [api.example.com host:5432]", p.Mode, p.Strings())
	}

	// dns = "strict" is the policy's DNS mode.
	dir = writeImage(t, func(f map[string][]byte, m *string) {
		*m = strings.Replace(*m, "[sha256]", "[network]\npolicy = \"allowlist\"\nallow = [\"api.example.com\"]\ndns = \"strict\"\n[sha256]", 1)
	})
	if img, err = Load(context.Background(), dir, LoadOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := img.Manifest.DefaultNetwork(); p.String() != "allowlist[api.example.com] dns=strict" {
		t.Fatalf("default network = %s, want allowlist[api.example.com] dns=strict", p)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(files map[string][]byte, manifest *string)
		want   string
	}{
		{"missing file", func(f map[string][]byte, m *string) { delete(f, "initrd.img") }, "initrd.img is missing"},
		{"hash mismatch", func(f map[string][]byte, m *string) { f["vmlinuz"] = []byte("tampered") }, "vmlinuz has sha256"},
		{"not qcow2", func(f map[string][]byte, m *string) {
			f["rootfs.qcow2"] = []byte("raw disk bytes, no magic")
			*m = strings.Replace(*m, sum(fakeQcow2()), sum(f["rootfs.qcow2"]), 1)
		}, "is not qcow2"},
		{"backing file", func(f map[string][]byte, m *string) {
			d := fakeQcow2()
			d[15] = 200
			f["rootfs.qcow2"] = d
			*m = strings.Replace(*m, sum(fakeQcow2()), sum(d), 1)
		}, "backing file of its own"},
		{"unknown key", func(f map[string][]byte, m *string) { *m = "colour = 1\n" + *m }, "unknown keys colour"},
		{"bad format", func(f map[string][]byte, m *string) { *m = strings.Replace(*m, "format = 1", "format = 9", 1) }, "format = 9"},
		{"escaping path", func(f map[string][]byte, m *string) {
			*m = strings.Replace(*m, `kernel = "vmlinuz"`, `kernel = "../vmlinuz"`, 1)
		}, "plain file name"},
		{"no memory", func(f map[string][]byte, m *string) {
			*m = strings.Replace(*m, "memory_mib = 256", "memory_mib = 0", 1)
		}, "memory_mib = 0"},
		{"bad toml", func(f map[string][]byte, m *string) { *m = "format = = 1" }, "manifest.toml"},
		{"bad network", func(f map[string][]byte, m *string) {
			*m = strings.Replace(*m, "[sha256]", "[network]\npolicy = \"allowlist\"\nallow = [\"10.0.0.0/8\"]\n[sha256]", 1)
		}, "network: "},
		{"strict dns with a wildcard", func(f map[string][]byte, m *string) {
			*m = strings.Replace(*m, "[sha256]", "[network]\npolicy = \"allowlist\"\nallow = [\"*.example.com\"]\ndns = \"strict\"\n[sha256]", 1)
		}, "dns strict resolves only names the policy lists"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeImage(t, tc.mutate)
			_, err := Load(context.Background(), dir, LoadOptions{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestLoadNoManifest(t *testing.T) {
	_, err := Load(context.Background(), t.TempDir(), LoadOptions{})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "has no manifest.toml") {
		t.Fatalf("err = %v", err)
	}
}

func TestVerifyCache(t *testing.T) {
	dir := writeImage(t, nil)
	cache := t.TempDir()
	if _, err := Load(context.Background(), dir, LoadOptions{VerifyCacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 3 {
		t.Fatalf("cache has %d entries, want 3", len(entries))
	}
	// A changed file (new size and mtime) must be hashed again and caught.
	kernel := filepath.Join(dir, "vmlinuz")
	os.Chmod(kernel, 0o644)
	if err := os.WriteFile(kernel, []byte("changed kernel bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Hour)
	os.Chtimes(kernel, future, future)
	_, err := Load(context.Background(), dir, LoadOptions{VerifyCacheDir: cache})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "vmlinuz has sha256") {
		t.Fatalf("err = %v, want a hash mismatch", err)
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("format = 1\nkernel = \"k\"\n"))
	f.Add([]byte("[resources]\nvcpus = -1\n[sha256]\nk = \"zz\"\n"))
	f.Add([]byte("\x00\xff[[["))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParseManifest(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error does not wrap ErrInvalid: %v", err)
			}
			return
		}
		// Anything accepted must be valid and name only plain files.
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted an invalid manifest: %v", err)
		}
		for _, name := range []string{m.Kernel, m.Initrd, m.Disk} {
			if filepath.Base(name) != name || strings.Contains(name, "..") && name != filepath.Base(name) {
				t.Fatalf("accepted path %q", name)
			}
		}
	})
}
