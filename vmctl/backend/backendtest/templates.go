package backendtest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// Template returns a valid named template fixture called name.
func Template(name string) api.Template {
	return api.Template{Name: name, Image: Sandbox(SandboxID).Image, VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048}
}

// TemplateFns are the functions of the fake's template methods (see
// Fake.Templates); nil ones answer fixtures.
type TemplateFns struct {
	ListFn func(ctx context.Context) ([]api.Template, error)
}

var _ backend.TemplateBackend = (*Fake)(nil)

// ListTemplates implements backend.TemplateBackend.
func (b *Fake) ListTemplates(ctx context.Context) ([]api.Template, error) {
	b.record("ListTemplates", "")
	return b.templateList(ctx)
}

// templateList is ListTemplates without the record: Templates.ListFn's
// answer, else the templates base and python (profile python).
func (b *Fake) templateList(ctx context.Context) ([]api.Template, error) {
	if b.Templates.ListFn != nil {
		return b.Templates.ListFn(ctx)
	}
	python := Template("python")
	python.Profile = "python"
	return []api.Template{Template("base"), python}, nil
}
