package client

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ListTemplates returns the daemon's named templates by name, with their
// images and default resources (GET /v1/templates). Errors: 501
// not_implemented from a daemon without templates support.
func (c *Client) ListTemplates(ctx context.Context) ([]api.Template, error) {
	var list api.TemplateList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "templates"), nil, &list)
	return list.Templates, err
}
