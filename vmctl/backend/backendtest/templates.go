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

// templateFake is the part of a Fake serving backend.TemplateBackend from
// Templates (promoted: Fake.Templates) or fixtures; it records its calls in its
// own log, which Fake.Calls merges.
type templateFake struct {
	Templates TemplateFns
	log       callLog
}

var _ backend.TemplateBackend = (*Fake)(nil)

// ListTemplates implements backend.TemplateBackend.
func (p *templateFake) ListTemplates(ctx context.Context) ([]api.Template, error) {
	p.log.record("ListTemplates", "")
	return p.templateList(ctx)
}

// templateList is ListTemplates without the record: Templates.ListFn's
// answer, else the templates base and python (profile python).
func (p *templateFake) templateList(ctx context.Context) ([]api.Template, error) {
	if p.Templates.ListFn != nil {
		return p.Templates.ListFn(ctx)
	}
	python := Template("python")
	python.Profile = "python"
	return []api.Template{Template("base"), python}, nil
}
