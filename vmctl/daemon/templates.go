package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
	"github.com/agentbox/agentbox/vmctl/image"
)

// Template is one named template of the daemon (serve --template
// NAME=DIR|PROFILE): a create request that names it boots its image.
type Template struct {
	// Name matches api.TemplatePattern and is unique among the daemon's
	// templates.
	Name string
	// Dir is the image directory, absolute (a PROFILE is resolved to its
	// image directory by the caller, before the daemon starts).
	Dir string
	// Profile is the flake profile Dir was built from, "" for a template
	// given as a directory; shown by GET /v1/templates.
	Profile string
}

// ErrTemplateNotFound: a create request named a template the daemon does
// not serve (404 template_not_found; the message lists the ones it does).
var ErrTemplateNotFound = errdefs.New(errdefs.ErrNotFound, api.CodeTemplateNotFound, "template not found")

// checkTemplates checks Config.Templates: valid and unique names,
// absolute directories holding an image that loads. Errors are
// errdefs.ErrInvalidArgument naming the template.
func checkTemplates(ctx context.Context, ts []Template, opts image.LoadOptions) error {
	seen := map[string]bool{}
	for _, t := range ts {
		what := fmt.Sprintf("template %s=%s", t.Name, t.Dir)
		if t.Profile != "" {
			what = fmt.Sprintf("template %s=%s (%s)", t.Name, t.Profile, t.Dir)
		}
		if !api.ValidTemplateName(t.Name) {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: the name must be 1 to 63 letters, digits, '_', '.', '-', starting with a letter or digit", what))
		}
		if seen[t.Name] {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: template %q is given twice: give each name once", what, t.Name))
		}
		seen[t.Name] = true
		if !filepath.IsAbs(t.Dir) {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: the image directory must be an absolute path", what))
		}
		if _, err := image.Load(ctx, t.Dir, opts); err != nil {
			return errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("%s: %v", what, err))
		}
	}
	return nil
}

// templateImage returns the image directory a create request boots and
// the template it names: req.Image with no template, else the template's
// directory. Errors: ErrTemplateNotFound.
func (s *lifecycleService) templateImage(req api.CreateSandboxRequest) (dir, template string, err error) {
	if req.Template == "" {
		return req.Image, "", nil
	}
	for _, t := range s.cfg.Templates {
		if t.Name == req.Template {
			return t.Dir, t.Name, nil
		}
	}
	return "", "", ErrTemplateNotFound.WithMessage(fmt.Sprintf("template %q not found: %s", req.Template, s.knownTemplates()))
}

// knownTemplates says which templates the daemon serves, for errors.
func (s *lifecycleService) knownTemplates() string {
	if len(s.cfg.Templates) == 0 {
		return "this daemon serves no templates (start it with `agentbox serve --template NAME=DIR|PROFILE`), or give an image directory instead"
	}
	names := make([]string, len(s.cfg.Templates))
	for i, t := range s.cfg.Templates {
		names[i] = t.Name
	}
	slices.Sort(names)
	return "this daemon serves " + strings.Join(names, ", ") + " (`agentbox templates` lists them)"
}

// ListTemplates implements backend.TemplateBackend: the daemon's
// templates by name, each with its image as it loads now (a template
// whose image no longer loads has Error set).
func (s *lifecycleService) ListTemplates(ctx context.Context) ([]api.Template, error) {
	out := make([]api.Template, 0, len(s.cfg.Templates))
	for _, t := range s.cfg.Templates {
		v := api.Template{Name: t.Name, Profile: t.Profile, Image: api.ImageRef{Dir: t.Dir}}
		img, err := image.Load(ctx, t.Dir, image.LoadOptions{VerifyCacheDir: s.cfg.ImageVerifyCacheDir})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			v.Error = err.Error()
		} else {
			m := img.Manifest
			v.Image.Name, v.Image.Digest = m.Name, digest(img.Digest)
			v.VCPUs, v.MemoryMiB, v.DiskMiB = m.Resources.VCPUs, m.Resources.MemoryMiB, m.Resources.DiskMiB
		}
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b api.Template) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
