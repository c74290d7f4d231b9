package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
)

// writeTemplateImage lays out a minimal valid image (manifest, kernel,
// initrd, a qcow2 v3 header as disk) named name in a new directory.
func writeTemplateImage(t *testing.T, name string, vcpus, memory int, disk int64) string {
	t.Helper()
	dir := t.TempDir()
	qcow := make([]byte, 104)
	copy(qcow, "QFI\xfb")
	qcow[7] = 3
	files := map[string][]byte{"vmlinuz": []byte("kernel"), "initrd.img": []byte("initrd"), "rootfs.qcow2": qcow}
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	diskLine := ""
	if disk > 0 {
		diskLine = fmt.Sprintf("disk_mib = %d\n", disk)
	}
	manifest := fmt.Sprintf("format = 1\nname = %q\nkernel = \"vmlinuz\"\ninitrd = \"initrd.img\"\ndisk = \"rootfs.qcow2\"\n"+
		"cmdline = \"console=ttyS0\"\nagent_port = \"org.agentbox.agent.0\"\nkernel_version = \"6.1.0-test\"\n"+
		"[resources]\nvcpus = %d\nmemory_mib = %d\n%s[sha256]\nvmlinuz = %q\n\"initrd.img\" = %q\n\"rootfs.qcow2\" = %q\n",
		name, vcpus, memory, diskLine, sum(files["vmlinuz"]), sum(files["initrd.img"]), sum(files["rootfs.qcow2"]))
	files[image.ManifestName] = []byte(manifest)
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(dir, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestCheckTemplates: the daemon refuses to start with a bad template,
// saying which one and what to fix.
func TestCheckTemplates(t *testing.T) {
	ctx := context.Background()
	opts := image.LoadOptions{VerifyCacheDir: t.TempDir()}
	base := writeTemplateImage(t, "debian", 1, 256, 0)
	if err := checkTemplates(ctx, []Template{{Name: "base", Dir: base}, {Name: "py", Dir: base, Profile: "python"}}, opts); err != nil {
		t.Fatalf("valid templates: %v", err)
	}
	for _, c := range []struct {
		name string
		ts   []Template
		want string
	}{
		{"bad name", []Template{{Name: "-x", Dir: base}}, "template -x=" + base + ": the name must be"},
		{"twice", []Template{{Name: "base", Dir: base}, {Name: "base", Dir: base}}, `template "base" is given twice`},
		{"relative", []Template{{Name: "base", Dir: "img"}}, "template base=img: the image directory must be an absolute path"},
		{"no image", []Template{{Name: "py", Dir: "/nonexistent", Profile: "python"}}, "template py=python (/nonexistent): "},
	} {
		err := checkTemplates(ctx, c.ts, opts)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want an invalid argument containing %q", c.name, err, c.want)
		}
	}
}

// TestTemplateImage: a create by template boots the template's image and
// records its name; an unknown one is 404 template_not_found naming the
// known ones.
func TestTemplateImage(t *testing.T) {
	d := assemble(&core{cfg: Config{Templates: []Template{{Name: "python", Dir: "/img/py"}, {Name: "base", Dir: "/img/base"}}}})
	dir, tpl, err := d.templateImage(api.CreateSandboxRequest{Template: "base"})
	if err != nil || dir != "/img/base" || tpl != "base" {
		t.Errorf("base: %q %q %v", dir, tpl, err)
	}
	dir, tpl, err = d.templateImage(api.CreateSandboxRequest{Image: "/img/other"})
	if err != nil || dir != "/img/other" || tpl != "" {
		t.Errorf("by image: %q %q %v", dir, tpl, err)
	}
	_, _, err = d.templateImage(api.CreateSandboxRequest{Template: "nope"})
	ae := api.ErrorFrom(err)
	if !errors.Is(err, ErrTemplateNotFound) || !errors.Is(err, errdefs.ErrNotFound) || ae.Status != http.StatusNotFound || ae.Code != api.CodeTemplateNotFound ||
		ae.Message != "template \"nope\" not found: this daemon serves base, python (`agentbox templates` lists them)" {
		t.Errorf("unknown template: %v → %+v", err, ae)
	}
	d.cfg.Templates = nil
	_, _, err = d.templateImage(api.CreateSandboxRequest{Template: "base"})
	if want := "template \"base\" not found: this daemon serves no templates (start it with `agentbox serve --template NAME=DIR|PROFILE`), or give an image directory instead"; err == nil || err.Error() != want {
		t.Errorf("no templates: %v, want %q", err, want)
	}
}

// TestListTemplates: by name, with the manifest's defaults; a template
// whose image went away shows why instead of failing the list.
func TestListTemplates(t *testing.T) {
	base := writeTemplateImage(t, "debian", 1, 256, 0)
	py := writeTemplateImage(t, "python", 2, 1024, 4096)
	gone := writeTemplateImage(t, "gone", 1, 256, 0)
	d := assemble(&core{cfg: Config{ImageVerifyCacheDir: t.TempDir(), Templates: []Template{
		{Name: "python", Dir: py, Profile: "python"}, {Name: "base", Dir: base}, {Name: "gone", Dir: gone},
	}}})
	if err := os.Remove(filepath.Join(gone, image.ManifestName)); err != nil {
		t.Fatal(err)
	}
	list, err := d.ListTemplates(context.Background())
	if err != nil || len(list) != 3 {
		t.Fatalf("ListTemplates: %+v, %v", list, err)
	}
	b, g, p := list[0], list[1], list[2]
	if b.Name != "base" || b.Image.Name != "debian" || b.Image.Dir != base || !strings.HasPrefix(b.Image.Digest, "sha256:") || len(b.Image.Digest) != 71 ||
		b.VCPUs != 1 || b.MemoryMiB != 256 || b.DiskMiB != 0 || b.Profile != "" || b.Error != "" {
		t.Errorf("base: %+v", b)
	}
	if p.Name != "python" || p.Profile != "python" || p.Image.Name != "python" || p.VCPUs != 2 || p.MemoryMiB != 1024 || p.DiskMiB != 4096 {
		t.Errorf("python: %+v", p)
	}
	if g.Name != "gone" || g.Image.Dir != gone || g.Image.Digest != "" || !strings.Contains(g.Error, image.ManifestName) {
		t.Errorf("gone: %+v", g)
	}
}
