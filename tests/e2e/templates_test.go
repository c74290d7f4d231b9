package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/tests/testenv"
)

// wireTemplate is a template as GET /v1/templates documents it.
type wireTemplate struct {
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Image   struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
		Dir    string `json:"dir"`
	} `json:"image"`
	VCPUs     int    `json:"vcpus"`
	MemoryMiB int    `json:"memory_mib"`
	Error     string `json:"error"`
}

// TestTemplates: serve --template names the test image; GET /v1/templates
// and `agentbox templates` list it, a create by name boots it and shows
// the name in the API, ls and inspect; an unknown name is 404
// template_not_found naming the known ones and leaves nothing behind; a
// daemon given a bad template refuses to start, saying which.
func TestTemplates(t *testing.T) {
	img := testenv.Image(t)
	d := startDaemon(t, "--template", "base="+img, "--template", "tcg2="+img)

	var list struct {
		Templates []wireTemplate `json:"templates"`
	}
	d.callJSON("GET", "/v1/templates", nil, http.StatusOK, &list)
	if len(list.Templates) != 2 || list.Templates[0].Name != "base" || list.Templates[1].Name != "tcg2" {
		t.Fatalf("templates %+v, want base and tcg2", list.Templates)
	}
	base := list.Templates[0]
	if base.Image.Dir != img || base.Image.Name == "" || !strings.HasPrefix(base.Image.Digest, "sha256:") || base.VCPUs < 1 || base.MemoryMiB < 256 || base.Error != "" || base.Profile != "" {
		t.Errorf("template base %+v", base)
	}
	r := d.cli(nil, "templates", "-q")
	expect(t, r, 0, "base\ntcg2\n", "")

	var sb wireSandbox
	var withTpl struct {
		Template string `json:"template"`
	}
	body, _ := d.call("POST", "/v1/sandboxes", `{"template":"base","accel":"tcg","name":"tpl1"}`, http.StatusCreated)
	if err := json.Unmarshal(body, &sb); err != nil {
		t.Fatal(err)
	}
	d.Track(sb.ID)
	json.Unmarshal(body, &withTpl)
	if sb.State != "running" || sb.Image.Dir != img || withTpl.Template != "base" {
		t.Fatalf("created %s: state %s, image %s, template %q; want running from %s, template base", sb.ID, sb.State, sb.Image.Dir, withTpl.Template, img)
	}
	expect(t, d.cli(nil, "exec", "tpl1", "--", "echo", "hi"), 0, "hi\n", "")
	r = d.cli(nil, "ls")
	lines := strings.Split(strings.TrimSuffix(string(r.stdout), "\n"), "\n")
	if f := strings.Fields(lines[len(lines)-1]); r.code != 0 || len(f) != 8 || f[1] != "tpl1" || f[4] != "base" {
		t.Errorf("ls: %q, want tpl1 with template base", r.stdout)
	}
	r = d.cli(nil, "inspect", "tpl1")
	var sbs []struct {
		Template string `json:"template"`
	}
	if r.code != 0 || json.Unmarshal(r.stdout, &sbs) != nil || len(sbs) != 1 || sbs[0].Template != "base" {
		t.Errorf("inspect: %q, want template base", r.stdout)
	}

	// An unknown template: 404 naming the known ones; no sandbox made.
	e := d.apiError("POST", "/v1/sandboxes", "application/json", []byte(`{"template":"nope","accel":"tcg"}`), http.StatusNotFound, "template_not_found")
	if want := "template \"nope\" not found: this daemon serves base, tcg2 (`agentbox templates` lists them)"; e.Message != want {
		t.Errorf("unknown template: %q, want %q", e.Message, want)
	}
	r = d.cli(nil, "create", "--template", "nope")
	expect(t, r, 125, "", "agentbox: template \"nope\" not found: this daemon serves base, tcg2 (`agentbox templates` lists them)\n")
	if n := len(d.list("")); n != 1 {
		t.Errorf("%d sandboxes after the refused creates, want 1", n)
	}

	// A daemon whose template is no image refuses to start.
	bad := filepath.Join(t.TempDir(), "noimage")
	os.Mkdir(bad, 0o755)
	cmd := exec.Command(agentboxBin, "--uri", testenv.URI(), "--state-dir", t.TempDir(), "--runtime-dir", testenv.ShortTempDir(t),
		"--socket", filepath.Join(testenv.ShortTempDir(t), "s.sock"), "serve", "--template", "base="+bad)
	cmd.Env = append(os.Environ(), "AGENTBOX_CONFIG=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "template base="+bad+": ") {
		t.Errorf("serve with a template that is no image: %v, %q; want it refused naming the template", err, out)
	}
}
