package api

import (
	"net/http"
	"net/url"
)

// route is one API route: the ServeMux pattern's method and path (also the
// OpenAPI document's operation), the query parameters it accepts, and its
// handler. The routes table is the only place routes are registered; the
// OpenAPI test compares it with the document.
type route struct {
	method string
	path   string
	query  []string
	handle func(s *Server, w http.ResponseWriter, r *http.Request, q url.Values) error
}

// Route describes one API route (see Routes).
type Route struct {
	// Method is the HTTP method, e.g. "GET".
	Method string
	// Path is the path pattern, with {id} and {pid} wildcards, e.g.
	// "/v1/sandboxes/{id}"; the same as the OpenAPI document's path.
	Path string
	// Query lists the query parameters the route accepts; others are
	// answered 400 bad_request.
	Query []string
}

// Routes returns the API's routes, in registration order: what
// NewServer's handler serves, and what the OpenAPI document must describe.
func Routes() []Route {
	out := make([]Route, len(routes))
	for i, rt := range routes {
		out[i] = Route{Method: rt.method, Path: rt.path, Query: append([]string(nil), rt.query...)}
	}
	return out
}

// routes are the API's routes.
var routes = []route{
	{"GET", "/v1/info", nil, (*Server).info},
	{"GET", "/v1/openapi.yaml", nil, (*Server).openAPI},
	{"GET", "/v1/events", nil, (*Server).events},
	{"GET", "/v1/audit", nil, (*Server).auditAll},
	{"GET", "/metrics", nil, (*Server).serveMetrics},

	{"POST", "/v1/sandboxes", nil, (*Server).createSandbox},
	{"GET", "/v1/sandboxes", []string{"label", "state"}, (*Server).listSandboxes},
	{"GET", "/v1/sandboxes/{id}", nil, (*Server).getSandbox},
	{"DELETE", "/v1/sandboxes/{id}", []string{"force"}, (*Server).deleteSandbox},
	{"POST", "/v1/sandboxes/{id}/stop", nil, (*Server).stopSandbox},
	{"GET", "/v1/sandboxes/{id}/console", []string{"tail"}, (*Server).console},
	{"GET", "/v1/sandboxes/{id}/audit", nil, (*Server).auditSandbox},
	{"GET", "/v1/sandboxes/{id}/execs", []string{"limit"}, (*Server).execHistory},

	{"POST", "/v1/sandboxes/{id}/exec", nil, (*Server).exec},
	{"POST", "/v1/sandboxes/{id}/processes", nil, (*Server).startProcess},
	{"GET", "/v1/sandboxes/{id}/processes", nil, (*Server).listProcesses},
	{"GET", "/v1/sandboxes/{id}/processes/{pid}", nil, (*Server).getProcess},
	{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", []string{"offset", "follow"}, (*Server).processOutput},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", []string{"close"}, (*Server).writeStdin},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/kill", nil, (*Server).killProcess},

	{"PUT", "/v1/sandboxes/{id}/files", []string{"path", "mode", "parents"}, (*Server).upload},
	{"GET", "/v1/sandboxes/{id}/files", []string{"path"}, (*Server).download},
	{"DELETE", "/v1/sandboxes/{id}/files", []string{"path", "recursive"}, (*Server).removeFile},
	{"GET", "/v1/sandboxes/{id}/files/stat", []string{"path"}, (*Server).stat},
	{"GET", "/v1/sandboxes/{id}/files/list", []string{"path"}, (*Server).list},
	{"POST", "/v1/sandboxes/{id}/files/mkdir", nil, (*Server).mkdir},

	{"POST", "/v1/sandboxes/{id}/snapshots", nil, (*Server).saveSnapshot},
	{"GET", "/v1/snapshots", []string{"sandbox"}, (*Server).listSnapshots},
	{"GET", "/v1/snapshots/{name}", nil, (*Server).getSnapshot},
	{"DELETE", "/v1/snapshots/{name}", nil, (*Server).deleteSnapshot},
	{"POST", "/v1/snapshots/{name}/restore", nil, (*Server).restoreSnapshot},
	{"GET", "/v1/warm", nil, (*Server).listWarm},
	{"DELETE", "/v1/warm/{key}", nil, (*Server).deleteWarm},
}
