package apiserver

import (
	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

func listWarm(s *Server, r *request) (api.WarmTemplateList, error) {
	list, err := s.backend.(backend.WarmBackend).ListWarm(r.Context())
	return api.WarmTemplateList{Templates: nonNil(list)}, err
}

func deleteWarm(s *Server, r *request) error {
	return s.backend.(backend.WarmBackend).DeleteWarm(r.Context(), r.key)
}
