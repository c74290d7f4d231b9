package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/accel"
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/client"
	"github.com/agentbox/agentbox/vmctl/daemon"
)

// templateFlag is serve's --template: the daemon's named templates.
var templateFlag = &cli.StringSliceFlag{
	Name: "template",
	Usage: "serve the image `NAME=DIR|PROFILE` under NAME (repeatable; `create --template NAME` and the E2B API's templateID use it; " +
		"a value with a / is an image directory, else a profile of the flake, built when the daemon starts; without NAME= the name is base)",
}

// createTemplateFlag is create's --template.
var createTemplateFlag = &cli.StringFlag{Name: "template", Usage: "boot the daemon's template `NAME` (see `agentbox templates`) instead of --image or a PROFILE"}

// configOwners are config file keys that mean different things to
// different commands: such a key applies only to the command named here
// (applyConfig). `template` is serve's list of NAME=DIR|PROFILE, not
// create's single template name.
var configOwners = map[string]string{"template": "serve"}

// serveTemplates parses serve's --template values into the daemon's
// templates, building each PROFILE with nix (its progress on stderr).
// A value with a '/' is an image directory (made absolute), any other a
// profile; a value without NAME= is named api.DefaultTemplate.
func serveTemplates(ctx context.Context, c *cli.Context) ([]daemon.Template, error) {
	var out []daemon.Template
	for _, v := range c.StringSlice("template") {
		name, src, ok := strings.Cut(v, "=")
		if !ok {
			name, src = api.DefaultTemplate, v
		}
		if !api.ValidTemplateName(name) {
			return nil, fmt.Errorf("--template %q: the name %q must be 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", v, name)
		}
		if src == "" {
			return nil, fmt.Errorf("--template %q: give NAME=DIR (an image directory, with a /) or NAME=PROFILE (a profile of the flake)", v)
		}
		t := daemon.Template{Name: name}
		if strings.ContainsRune(src, '/') {
			abs, err := filepath.Abs(src)
			if err != nil {
				return nil, fmt.Errorf("--template %q: %w", v, err)
			}
			t.Dir = abs
		} else {
			dir, err := resolveProfile(ctx, c, src, true) // profile.go
			if err != nil {
				return nil, fmt.Errorf("--template %q: profile %s: %w (an image directory needs a /, e.g. ./%s)", v, src, err, src)
			}
			t.Dir, t.Profile = dir, src
		}
		out = append(out, t)
	}
	return out, nil
}

func templatesCommand() *cli.Command {
	return &cli.Command{
		Name:  "templates",
		Usage: "list the daemon's named templates (serve --template NAME=DIR|PROFILE)",
		Description: "Prints one line per template, by name: NAME, IMAGE (the manifest's name), SOURCE (the profile it\n" +
			"was built from, or its image directory), DIGEST, and the manifest's default CPUS, MEMORY and DISK.\n" +
			"`agentbox create --template NAME` and the E2B API's templateID boot one. A template whose\n" +
			"image no longer loads shows ERROR. -q prints only names; --json the API's objects.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print only the names"},
			&cli.BoolFlag{Name: "json", Usage: "print a JSON array of the templates"},
		},
		OnUsageError: usageError,
		Action: clientAction(func(ctx context.Context, c *cli.Context, cl *client.Client) error {
			if _, err := exactArgs(c, 0, "agentbox templates [-q] [--json]"); err != nil {
				return err
			}
			list, err := cl.ListTemplates(ctx)
			if err != nil {
				return err
			}
			return writeList(c, list, func(t api.Template) string { return t.Name }, writeTemplateTable)
		}),
	}
}

// writeTemplateTable writes the `templates` table.
func writeTemplateTable(w io.Writer, list []api.Template, _ time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIMAGE\tSOURCE\tDIGEST\tCPUS\tMEMORY\tDISK")
	for _, t := range list {
		source := t.Image.Dir
		if t.Profile != "" {
			source = "profile " + t.Profile
		}
		if t.Error != "" {
			fmt.Fprintf(tw, "%s\tERROR\t%s\t%s\t-\t-\t-\n", t.Name, source, t.Error)
			continue
		}
		disk := "image's"
		if t.DiskMiB > 0 {
			disk = fmt.Sprintf("%dMiB", t.DiskMiB)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%dMiB\t%s\n", t.Name, t.Image.Name, source, shortDigest(strings.TrimPrefix(t.Image.Digest, "sha256:")), t.VCPUs, t.MemoryMiB, disk)
	}
	return tw.Flush()
}

// createFromTemplate is `agentbox create --template NAME`: the daemon
// boots its template's image. An --image given on the command line or a
// PROFILE is refused ($AGENTBOX_IMAGE is ignored: the template names the
// image).
func createFromTemplate(ctx context.Context, c *cli.Context, cl *client.Client) error {
	usage := "agentbox create [FLAGS] --template NAME"
	if img := c.String("image"); img != "" && img != os.Getenv("AGENTBOX_IMAGE") {
		return fmt.Errorf("give --template NAME or --image DIR, not both: usage: %s", usage)
	}
	if c.Args().Present() {
		return fmt.Errorf("give --template NAME or a PROFILE, not both (got %q): usage: %s", c.Args().First(), usage)
	}
	if c.Bool("locked") {
		return fmt.Errorf("--locked checks a PROFILE against the lock file, not a template of the daemon: usage: %s", usage)
	}
	if _, err := accel.ParseMode(c.String("accel")); err != nil {
		return err
	}
	req, err := createRequest(c, "")
	if err != nil {
		return err
	}
	if req.Env, err = sandboxEnv(c); err != nil { // createenv.go
		return err
	}
	if req.Secrets, err = sandboxSecrets(c); err != nil { // createsecrets.go
		return err
	}
	req.Warm = c.Bool("warm")
	sb, err := cl.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintln(c.App.Writer, sb.ID)
	return nil
}
