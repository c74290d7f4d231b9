package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/daemon"
)

// fakeTemplates are the fake daemon's templates (cliBackend); a create
// with another template is 404 template_not_found.
var fakeTemplates = []api.Template{
	{Name: "base", Image: api.ImageRef{Name: "test-image", Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Dir: "/images/base"}, VCPUs: 1, MemoryMiB: 512},
	{Name: "python", Profile: "python", Image: api.ImageRef{Name: "python", Digest: "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", Dir: "/nix/store/x-python"}, VCPUs: 2, MemoryMiB: 1024, DiskMiB: 4096},
	{Name: "gone", Image: api.ImageRef{Dir: "/images/gone"}, Error: "/images/gone/manifest.toml: no such file or directory"},
}

func TestCLITemplates(t *testing.T) {
	d := startDaemon(t)
	d.cli(t, nil, "templates").check(t, 0, ""+
		"NAME    IMAGE       SOURCE          DIGEST                                                 CPUS  MEMORY   DISK\n"+
		"base    test-image  /images/base    0123456789ab                                           1     512MiB   image's\n"+
		"python  python      profile python  fedcba987654                                           2     1024MiB  4096MiB\n"+
		"gone    ERROR       /images/gone    /images/gone/manifest.toml: no such file or directory  -     -        -\n", "")
	d.cli(t, nil, "templates", "-q").check(t, 0, "base\npython\ngone\n", "")
	r := d.cli(t, nil, "templates", "--json")
	var list []api.Template
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 3 || list[1].Profile != "python" {
		t.Errorf("templates --json: %q (%v)", r.stdout, err)
	}

	// create --template sends the name and no image, even with
	// $AGENTBOX_IMAGE set; ls and inspect show it.
	t.Setenv("AGENTBOX_IMAGE", "/env/img")
	d.cli(t, nil, "create", "--template", "python", "--name", "p1").check(t, 0, "000000abc001\n", "")
	want := api.CreateSandboxRequest{Template: "python", Name: "p1", Accel: "auto", BootTimeoutMs: 120000}
	if got := d.mem.Creates(); len(got) != 1 || !equalJSON(got[0], want) {
		t.Fatalf("create requests %+v, want %+v", got, want)
	}
	d.cli(t, nil, "create", "--image", "/img").check(t, 0, "000000abc002\n", "")
	d.cli(t, nil, "ls").check(t, 0, ""+
		"ID            NAME  STATE    IMAGE       TEMPLATE  CPUS  MEMORY  AGE\n"+
		"000000abc001  p1    running  test-image  python    1     256MiB  1m\n"+
		"000000abc002  -     running  test-image  -         1     256MiB  1m\n", "")
	r = d.cli(t, nil, "inspect", "p1")
	var sbs []api.Sandbox
	if err := json.Unmarshal([]byte(r.stdout), &sbs); err != nil || len(sbs) != 1 || sbs[0].Template != "python" || sbs[0].Image.Dir != "/nix/store/x-python" {
		t.Errorf("inspect p1: %q (%v)", r.stdout, err)
	}

	// Bad input: nothing is created.
	d.cli(t, nil, "create", "--template", "nope").check(t, 125, "", "agentbox: template \"nope\" not found: this daemon serves base, gone, python (`agentbox templates` lists them)\n")
	d.cli(t, nil, "create", "--template", "base", "--image", "/x").check(t, 125, "", "agentbox: give --template NAME or --image DIR, not both: usage: agentbox create [FLAGS] --template NAME\n")
	d.cli(t, nil, "create", "--template", "base", "python").check(t, 125, "", "agentbox: give --template NAME or a PROFILE, not both (got \"python\"): usage: agentbox create [FLAGS] --template NAME\n")
	d.cli(t, nil, "create", "--template", "base", "--locked").check(t, 125, "", "agentbox: --locked checks a PROFILE against the lock file, not a template of the daemon: usage: agentbox create [FLAGS] --template NAME\n")
	d.cli(t, nil, "create", "--template", "a/b").check(t, 125, "", "agentbox: template \"a/b\" is invalid: use 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit (GET /v1/templates lists them)\n")
	if n := len(d.mem.Creates()); n != 3 {
		t.Errorf("%d create requests reached the daemon, want 3 (the unknown template's)", n)
	}
}

// TestCLIConfigTemplate: the config file's template list is serve's; it
// does not become create's --template.
func TestCLIConfigTemplate(t *testing.T) {
	d := startDaemon(t)
	if err := os.WriteFile(d.config, []byte("template = [\"base=/images/base\", \"python=python\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cli(t, nil, "create", "--image", "/img").check(t, 0, "000000abc001\n", "")
	if c := d.mem.Creates()[0]; c.Template != "" || c.Image != "/img" {
		t.Errorf("create with a config file template list: %+v", c)
	}
}

// TestServeTemplates: serve's --template values, from the command line
// or the config file; directories need a /, NAME= defaults to base.
func TestServeTemplates(t *testing.T) {
	wd, _ := os.Getwd()
	parse := func(config string, args ...string) ([]daemon.Template, error) {
		cfg := filepath.Join(t.TempDir(), "c.toml")
		if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		var got []daemon.Template
		var err error
		app := newApp()
		app.Writer, app.ErrWriter = &bytes.Buffer{}, &bytes.Buffer{}
		for _, cmd := range app.Commands {
			if cmd.Name == "serve" {
				cmd.Action = func(c *cli.Context) error {
					if err = applyConfig(c); err == nil {
						got, err = serveTemplates(c.Context, c)
					}
					return nil
				}
			}
		}
		if rerr := app.Run(append([]string{"agentbox", "--config", cfg, "serve"}, args...)); rerr != nil {
			t.Fatalf("run: %v", rerr)
		}
		return got, err
	}
	got, err := parse("", "--template", "/images/base", "--template", "py=./img/py")
	want := []daemon.Template{{Name: "base", Dir: "/images/base"}, {Name: "py", Dir: filepath.Join(wd, "img/py")}}
	if err != nil || !equalJSON(got, want) {
		t.Errorf("flags: %+v, %v; want %+v", got, err, want)
	}
	got, err = parse("template = [\"base=/a/b\", \"x=/c\"]\n")
	if want := []daemon.Template{{Name: "base", Dir: "/a/b"}, {Name: "x", Dir: "/c"}}; err != nil || !equalJSON(got, want) {
		t.Errorf("config: %+v, %v; want %+v", got, err, want)
	}
	for _, c := range []struct{ arg, msg string }{
		{"-x=/a", `--template "-x=/a": the name "-x" must be 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit`},
		{"base=", `--template "base=": give NAME=DIR (an image directory, with a /) or NAME=PROFILE (a profile of the flake)`},
	} {
		if _, err := parse("", "--template", c.arg); err == nil || err.Error() != c.msg {
			t.Errorf("--template %s: %v, want %q", c.arg, err, c.msg)
		}
	}
}
