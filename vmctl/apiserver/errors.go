package apiserver

import (
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
)

// badRequest returns the HTTP layer's own 400 bad_request (the request
// could not be read: JSON, query string, body).
func badRequest(format string, args ...any) *api.Error {
	return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, format, args...)
}
