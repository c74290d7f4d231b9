package apiserver

import (
	"net/http"

	"github.com/agentbox/agentbox/vmctl/api"
	"github.com/agentbox/agentbox/vmctl/backend"
)

// route is one API route: the ServeMux pattern's method and path (also the
// OpenAPI document's operation), the query parameters it accepts, and its
// handler. The routes table is the only place routes are registered; the
// OpenAPI test compares it with the document.
type route struct {
	method string
	path   string
	query  []string
	handle handler
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

// routes are the API's routes. Each handler is built by a typed helper
// (route.go): reply (200 JSON), created (201 JSON with Location), status
// (an empty answer), withBody (decode and validate the JSON body first) or
// stream (writes its own answer); path values are checked before any of
// them runs. WebSocket routes check the upgrade first (webSocket), before
// ?resume=true resumes (resumable).
var routes = []route{
	{"GET", "/v1/info", nil, reply(http.StatusOK, info)},
	{"GET", "/v1/openapi.yaml", nil, stream(openAPI)},
	{"GET", "/v1/events", nil, stream(events)},
	{"GET", "/v1/audit", nil, stream(auditLog)},
	{"GET", "/metrics", nil, stream(serveMetrics)},

	{"POST", "/v1/sandboxes", nil, created(sandboxLocation, withBody((*api.CreateSandboxRequest).Validate, createSandbox))},
	{"GET", "/v1/sandboxes", []string{"label", "state"}, reply(http.StatusOK, listSandboxes)},
	{"GET", "/v1/sandboxes/{id}", nil, reply(http.StatusOK, getSandbox)},
	{"DELETE", "/v1/sandboxes/{id}", []string{"force"}, status(http.StatusNoContent, deleteSandbox)},
	{"POST", "/v1/sandboxes/{id}/stop", nil, reply(http.StatusOK, stopSandbox)},
	{"POST", "/v1/sandboxes/{id}/timeout", nil, needs[backend.TimeoutBackend]("timeouts", reply(http.StatusOK, withBody((*api.TimeoutRequest).Validate, setTimeout)))},
	{"POST", "/v1/sandboxes/{id}/pause", nil, needs[backend.LifecycleBackend]("pause", reply(http.StatusOK, withBody(nil, pauseSandbox)))},
	{"POST", "/v1/sandboxes/{id}/resume", nil, needs[backend.LifecycleBackend]("resume", reply(http.StatusOK, resumeSandbox))},
	{"POST", "/v1/sandboxes/{id}/start", nil, needs[backend.LifecycleBackend]("start", reply(http.StatusOK, startSandbox))},
	{"GET", "/v1/sandboxes/{id}/console", []string{"tail"}, stream(console)},
	{"GET", "/v1/sandboxes/{id}/audit", nil, stream(auditLog)},
	{"GET", "/v1/sandboxes/{id}/execs", []string{"limit"}, reply(http.StatusOK, execHistory)},

	{"POST", "/v1/sandboxes/{id}/exec", []string{"resume"}, resumable(stream(exec))},
	{"GET", "/v1/sandboxes/{id}/exec/ws", []string{"resume"}, webSocket("POST /v1/sandboxes/{id}/exec runs a command without one", resumable(stream(execWS)))},
	{"POST", "/v1/sandboxes/{id}/processes", []string{"resume"}, resumable(created(processLocation, withBody(validateDetached, startProcess)))},
	{"GET", "/v1/sandboxes/{id}/processes", nil, reply(http.StatusOK, listProcesses)},
	{"GET", "/v1/sandboxes/{id}/processes/{pid}", nil, reply(http.StatusOK, getProcess)},
	{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", []string{"offset", "follow"}, stream(processOutput)},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", []string{"close", "resume"}, resumable(reply(http.StatusOK, writeStdin))},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/kill", []string{"resume"}, resumable(status(http.StatusNoContent, noValue(withBody((*api.KillRequest).Validate, killProcess))))},
	{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", nil, needs[backend.ProcessTerminalBackend]("process terminals", reply(http.StatusOK, withBody((*api.TtySize).Validate, resizeProcess)))},
	{"GET", "/v1/sandboxes/{id}/processes/{pid}/ws", []string{"offset", "resume"}, needs[backend.ProcessTerminalBackend]("process terminals", webSocket("GET /v1/sandboxes/{id}/processes/{pid}/output streams the output without one", resumable(stream(processWS))))},

	{"PUT", "/v1/sandboxes/{id}/files", []string{"path", "mode", "parents", "owner", "resume"}, resumable(reply(http.StatusCreated, upload))},
	{"GET", "/v1/sandboxes/{id}/files", []string{"path", "resume"}, resumable(stream(download))},
	{"DELETE", "/v1/sandboxes/{id}/files", []string{"path", "recursive", "resume"}, resumable(status(http.StatusNoContent, removeFile))},
	{"GET", "/v1/sandboxes/{id}/files/stat", []string{"path", "resume"}, resumable(reply(http.StatusOK, stat))},
	{"GET", "/v1/sandboxes/{id}/files/list", []string{"path", "depth", "resume"}, resumable(reply(http.StatusOK, list))},
	{"POST", "/v1/sandboxes/{id}/files/move", []string{"resume"}, resumable(reply(http.StatusOK, withBody((*api.MoveRequest).Validate, moveFile)))},
	{"POST", "/v1/sandboxes/{id}/files/mkdir", []string{"resume"}, resumable(status(http.StatusCreated, noValue(withBody((*api.MkdirRequest).Validate, mkdir))))},
	{"GET", "/v1/sandboxes/{id}/files/watch", []string{"path", "recursive", "resume"}, needs[backend.WatchBackend]("file watching", resumable(stream(watchFiles)))},

	{"POST", "/v1/sandboxes/{id}/ports", []string{"resume"}, resumable(needs[backend.PortBackend]("port forwarding", created(portLocation, withBody((*api.PortForwardRequest).Validate, forwardPort))))},
	{"GET", "/v1/sandboxes/{id}/ports", nil, needs[backend.PortBackend]("port forwarding", reply(http.StatusOK, listPorts))},
	{"DELETE", "/v1/sandboxes/{id}/ports/{port}", nil, needs[backend.PortBackend]("port forwarding", status(http.StatusNoContent, removePort))},

	{"POST", "/v1/sandboxes/{id}/snapshots", nil, needs[backend.SnapshotBackend]("snapshots", created(snapshotLocation, withBody((*api.SaveSnapshotRequest).Validate, saveSnapshot)))},
	{"GET", "/v1/snapshots", []string{"sandbox"}, needs[backend.SnapshotBackend]("snapshots", reply(http.StatusOK, listSnapshots))},
	{"GET", "/v1/snapshots/{name}", nil, needs[backend.SnapshotBackend]("snapshots", reply(http.StatusOK, getSnapshot))},
	{"DELETE", "/v1/snapshots/{name}", nil, needs[backend.SnapshotBackend]("snapshots", status(http.StatusNoContent, deleteSnapshot))},
	{"POST", "/v1/snapshots/{name}/restore", nil, needs[backend.SnapshotBackend]("snapshots", stream(restoreSnapshot))},
	{"GET", "/v1/warm", nil, needs[backend.WarmBackend]("warm templates", reply(http.StatusOK, listWarm))},
	{"DELETE", "/v1/warm/{key}", nil, needs[backend.WarmBackend]("warm templates", status(http.StatusNoContent, deleteWarm))},
	{"GET", "/v1/templates", nil, needs[backend.TemplateBackend]("templates", reply(http.StatusOK, listTemplates))},
	{"GET", "/v1/nodes", nil, needs[backend.NodeBackend]("cluster nodes", reply(http.StatusOK, listNodes))},
	{"POST", "/v1/nodes/{node}/drain", nil, needs[backend.NodeBackend]("cluster nodes", reply(http.StatusOK, drainNode))},
	{"POST", "/v1/nodes/{node}/undrain", nil, needs[backend.NodeBackend]("cluster nodes", reply(http.StatusOK, undrainNode))},
	{"POST", "/v1/cluster/secrets", nil, reply(http.StatusOK, withBody((*api.ClusterSecretsRequest).Validate, clusterSecrets))},
}
