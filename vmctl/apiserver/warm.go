package apiserver

import (
	"context"

	"github.com/agentbox/agentbox/vmctl/api"
)

// WarmBackend is the part of a Backend that manages warm templates; a
// Backend without it answers the warm routes 501 not_implemented.
type WarmBackend interface {
	// ListWarm lists the warm templates, most recently used first.
	ListWarm(ctx context.Context) ([]api.WarmTemplate, error)
	// DeleteWarm removes the template with key (syntax-checked) and its
	// pool's paused sandboxes; the next warm create of its shape builds
	// it again. Errors: 404 not_found.
	DeleteWarm(ctx context.Context, key string) error
}

func listWarm(s *Server, r *request) (api.WarmTemplateList, error) {
	list, err := s.backend.(WarmBackend).ListWarm(r.Context())
	return api.WarmTemplateList{Templates: nonNil(list)}, err
}

func deleteWarm(s *Server, r *request) error {
	return s.backend.(WarmBackend).DeleteWarm(r.Context(), r.key)
}
