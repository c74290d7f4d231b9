package apiserver

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

func listTemplates(s *Server, r *request) (api.TemplateList, error) {
	list, err := s.backend.(backend.TemplateBackend).ListTemplates(r.Context())
	return api.TemplateList{Templates: nonNil(list)}, err
}
