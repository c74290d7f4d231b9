package apiserver

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/vmctl/api"
)

// invalid returns the HTTP layer's own 400 invalid_argument.
func invalid(format string, args ...any) *api.Error {
	return api.Errorf(http.StatusBadRequest, api.CodeInvalidArgument, format, args...)
}

// badRequest returns the HTTP layer's own 400 bad_request (the request
// could not be read: JSON, query string, body).
func badRequest(format string, args ...any) *api.Error {
	return api.Errorf(http.StatusBadRequest, api.CodeBadRequest, format, args...)
}

// quoteShort quotes s for an error message, cut to 80 bytes.
func quoteShort(s string) string {
	if len(s) > 80 {
		return strconv.Quote(s[:80]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}
