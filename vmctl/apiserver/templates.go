package apiserver

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
)

// TemplateBackend is the part of a Backend that serves named templates
// (serve --template); a Backend without it answers GET /v1/templates 501
// not_implemented.
type TemplateBackend interface {
	// ListTemplates lists the templates by name, each with its image's
	// manifest defaults as the image loads now.
	ListTemplates(ctx context.Context) ([]api.Template, error)
}

func listTemplates(s *Server, r *request) (api.TemplateList, error) {
	list, err := s.backend.(TemplateBackend).ListTemplates(r.Context())
	return api.TemplateList{Templates: nonNil(list)}, err
}
