package e2b

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/errdefs"
)

// TemplateResolver turns E2B template IDs into what a create request
// boots, and back: the seam between this front and the daemon's named
// templates. Until the core names templates (CreateSandboxRequest's
// template, `serve --template`), ImageTemplates maps names to image
// directories; afterwards an implementation sets the request's template
// name and reads the sandbox's.
type TemplateResolver interface {
	// Apply points req at the template named templateID. Errors: a
	// template the daemon does not serve, errdefs.ErrNotFound (answered
	// 404) with a message naming those it does.
	Apply(ctx context.Context, templateID string, req *api.CreateSandboxRequest) error
	// Of returns the template ID E2B shows for sb: the name it was made
	// from, else its image's name (a sandbox from an image directory or a
	// snapshot).
	Of(sb api.Sandbox) string
}

// ImageTemplates is a TemplateResolver over template names and the image
// directories they stand for (absolute paths on the daemon's host).
type ImageTemplates map[string]string

var _ TemplateResolver = ImageTemplates(nil)

// Apply implements TemplateResolver: req.Image becomes the template's
// directory.
func (t ImageTemplates) Apply(_ context.Context, templateID string, req *api.CreateSandboxRequest) error {
	dir, ok := t[templateID]
	if !ok {
		names := slices.Sorted(maps.Keys(t))
		served := "none: start the daemon with --e2b-image DIR for the template \"base\""
		if len(names) > 0 {
			served = strings.Join(names, ", ")
		}
		return errdefs.ErrNotFound.WithMessage(fmt.Sprintf("template %q not found: this agentbox daemon serves %s", templateID, served))
	}
	req.Image = dir
	return nil
}

// Of implements TemplateResolver: the first name (in sorted order) whose
// directory is sb's image's, else the image's name.
func (t ImageTemplates) Of(sb api.Sandbox) string {
	names := make([]string, 0, len(t))
	for n, dir := range t {
		if filepath.Clean(dir) == filepath.Clean(sb.Image.Dir) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return sb.Image.Name
	}
	slices.Sort(names)
	return names[0]
}
