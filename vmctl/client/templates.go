package client

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// templates holds the Client's calls on the daemon's templates: the named
// templates and the warm templates with their pools.
type templates struct{ *transport }

// ListTemplates returns the daemon's named templates by name, with their
// images and default resources (GET /v1/templates). Errors: 501
// not_implemented from a daemon without templates support.
func (c *templates) ListTemplates(ctx context.Context) ([]api.Template, error) {
	var list api.TemplateList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "templates"), nil, &list)
	return list.Templates, err
}
