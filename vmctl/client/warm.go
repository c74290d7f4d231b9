package client

import (
	"context"
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// ListWarm returns the warm templates, most recently used first, with
// the size of their warm pools (GET /v1/warm). Errors: 501
// not_implemented.
func (c *templates) ListWarm(ctx context.Context) ([]api.WarmTemplate, error) {
	var list api.WarmTemplateList
	err := c.call(ctx, http.MethodGet, c.endpoint(nil, "v1", "warm"), nil, &list)
	return list.Templates, err
}

// DeleteWarm removes the warm template with key and its pool (DELETE
// /v1/warm/{key}). Errors: 400 for a key that is not 24 hex digits, 404.
func (c *templates) DeleteWarm(ctx context.Context, key string) error {
	return c.call(ctx, http.MethodDelete, c.endpoint(nil, "v1", "warm", key), nil, nil)
}
