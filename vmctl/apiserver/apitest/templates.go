package apitest

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/apiserver"
)

// Template returns a valid named template fixture called name.
func Template(name string) api.Template {
	return api.Template{Name: name, Image: Sandbox(SandboxID).Image, VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048}
}

// TemplateFns are the functions of the fake's template methods (see
// Backend.Templates); nil ones answer fixtures.
type TemplateFns struct {
	ListFn func(ctx context.Context) ([]api.Template, error)
}

var _ apiserver.TemplateBackend = (*Backend)(nil)

// ListTemplates implements apiserver.TemplateBackend.
func (b *Backend) ListTemplates(ctx context.Context) ([]api.Template, error) {
	b.record("ListTemplates", "")
	if b.Templates.ListFn != nil {
		return b.Templates.ListFn(ctx)
	}
	python := Template("python")
	python.Profile = "python"
	return []api.Template{Template("base"), python}, nil
}
