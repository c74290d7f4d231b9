// Package apiserver is the HTTP server of `agentbox serve`'s REST API: its
// routes and handlers (built by the typed helpers of route.go), request
// decoding, authentication, listeners (unix sockets, TCP, systemd socket
// activation), streaming and metrics, over the backend.Backend the daemon
// implements (vmctl/backend). The wire types, codes, validation and the error
// table it answers with are vmctl/api's; vmctl/client is the Go client.
//
// # Routes
//
// All under /v1 but /metrics; Routes lists them (the server registers
// exactly those, the OpenAPI test compares them with the document):
//
//	GET    /v1/info                                   Info
//	GET    /v1/openapi.yaml                           the OpenAPI 3.0.3 document
//	GET    /v1/events                                 ndjson Event stream (endless)
//	GET    /v1/audit                                  ndjson audit.Entry, all sandboxes
//	GET    /metrics                                   Config.Metrics (Prometheus)
//	POST   /v1/sandboxes                              CreateSandboxRequest → 201 Sandbox
//	GET    /v1/sandboxes?label=K=V&state=S            SandboxList
//	GET    /v1/sandboxes/{id}                         Sandbox
//	DELETE /v1/sandboxes/{id}?force=true              204
//	POST   /v1/sandboxes/{id}/stop                    Sandbox
//	POST   /v1/sandboxes/{id}/pause                   PauseRequest → Sandbox (lifecycle.go)
//	POST   /v1/sandboxes/{id}/resume                  Sandbox
//	POST   /v1/sandboxes/{id}/start                   Sandbox
//	GET    /v1/sandboxes/{id}/console?tail=BYTES      text/plain
//	GET    /v1/sandboxes/{id}/audit                   ndjson audit.Entry
//	POST   /v1/sandboxes/{id}/exec                    ExecRequest → ndjson ExecEvent
//	POST   /v1/sandboxes/{id}/processes               ExecRequest → 201 Process
//	GET    /v1/sandboxes/{id}/processes               ProcessList
//	GET    /v1/sandboxes/{id}/processes/{pid}         Process
//	GET    .../processes/{pid}/output?offset=&follow= ndjson ExecEvent
//	POST   .../processes/{pid}/stdin?close=true       raw body → StdinResult
//	POST   .../processes/{pid}/kill                   KillRequest → 204
//	PUT    /v1/sandboxes/{id}/files?path=&mode=&parents= raw body → 201 FileInfo
//	GET    /v1/sandboxes/{id}/files?path=             raw bytes (HeaderMode, HeaderModTime)
//	DELETE /v1/sandboxes/{id}/files?path=&recursive=  204
//	GET    /v1/sandboxes/{id}/files/stat?path=        FileInfo
//	GET    /v1/sandboxes/{id}/files/list?path=        FileList
//	POST   /v1/sandboxes/{id}/files/mkdir             MkdirRequest → 201
//
// The exec, process (start, stdin, kill) and file routes take ?resume=true:
// a paused sandbox is resumed first.
//
// An unknown route is 404 not_found; a known path with another method is
// 405 method_not_allowed with an Allow header (HEAD is refused too).
//
// # Requests
//
// The server checks every request before it calls the Backend, so the
// Backend sees only well-formed values:
//   - JSON bodies: Content-Type application/json (parameters such as
//     charset allowed; a missing Content-Type is taken as JSON, since plain
//     clients often send none; anything else is 415 unsupported_media), at
//     most MaxJSONBodyBytes (413 payload_too_large), exactly one JSON object
//     (an empty body, null, an array or trailing data is 400 bad_request),
//     only the type's fields spelled exactly as their JSON tags (encoding/json
//     would match "Image" to "image"; the API does not), values of the right
//     type (400 naming the field, e.g. `field "limits.ttl_seconds" must be an
//     integer, not a string`).
//   - {id}: an ID (IDPattern) or a name (NamePattern); {pid}:
//     ProcessIDPattern; URL paths with "." or ".." elements (also
//     percent-encoded) or "//" are 400 invalid_argument, not redirected.
//   - Query parameters: each route takes a fixed set (Route.Query); an
//     unknown one, or one given twice (but the repeatable label), is 400.
//   - Guest paths (path=, MkdirRequest.Path): CleanGuestPath. Modes:
//     ParseMode. Create, exec and kill requests: see vmctl/api's validate.go (names,
//     labels, resources, accel; argv, env, cwd, timeout; signal).
//
// Raw bodies (upload, stdin) have no size limit and are streamed to the
// Backend as they arrive; a body that ends before its Content-Length, or
// whose connection fails, makes the Backend's reads fail with a 400 *Error
// (an upload must then not be committed).
//
// # Streams
//
// application/x-ndjson answers carry one JSON value per line and are
// flushed after each line.
//
// Exec (POST .../exec): "started" (exec_id, pid), "stdout"/"stderr" events
// (Data at most 64 KiB each, base64 in JSON, Offset counting both streams
// together) in the order they were written, then exactly one "exit"
// (ExitStatus) or "error" (Error). The 200 goes out with the first event, so
// an error before the command started (404, 409 sandbox_not_running, 429
// exec_limit_reached, 400) is an ordinary error answer with its status; an
// error after it is the "error" event. When the client goes away the
// request's context ends and the Backend kills the command.
//
// Process output (GET .../output): stdout/stderr events from ?offset= on,
// then "exit" if the process has ended; with follow=true it waits for more.
// A stream that ends without "exit" means the process still runs: resume
// from the last offset plus its data length.
//
// Audit and events stream audit.Entry and Event lines; events is endless
// (its 200 goes out at once) until the client goes or Shutdown starts.
//
// A stream whose Backend fails after its 200 went out (download, console,
// audit, events) is cut: the connection is closed without the chunked
// terminator, so clients see an unexpected EOF, never a clean end.
//
// # Errors
//
// Every error answer is api.ErrorResponse JSON, {"error": {"code",
// "message", "details"}}. A Backend returns the errors of the layers below
// as they are (errdefs categories and reasons, wrapped with %w); the server
// answers them through api.ErrorFrom, the one table of statuses and codes
// (an uncategorised error is 500 internal, logged at Error level). Errors are counted by code in
// agentbox_api_errors_total{code}; request durations by route pattern in
// agentbox_api_request_duration_seconds{route,method,status} (streams count
// until they end), when Config.Registerer is set.
//
// # Listeners and authentication
//
// One Server serves any number of listeners (Serve per listener):
//   - unix sockets (ListenUnix, or systemd's through ActivationListeners):
//     no token; file permissions (0660, a group) decide who may connect,
//     and the peer's uid (SO_PEERCRED) names the caller, "uid:N".
//   - TCP: refused unless Config has a Token or Tenants, or TLS that
//     requires verified client certificates (CheckTCP).
//     With a Token (or Tenants) every request needs "Authorization: Bearer
//     TOKEN", checked against the daemon's one keyring (vmctl/auth,
//     Config.Keyring: the admin's, the tenants' and the cluster peers'
//     tokens, compared in constant time; 401 unauthorized with
//     WWW-Authenticate and auth's "missing token"/"wrong token" message
//     otherwise), and the caller is "token" ("tenant:NAME" for a
//     tenant's); with TLS a verified client certificate names the caller
//     "tls:CN". /metrics and /v1/openapi.yaml need the token too.
//
// The caller travels in the request's context (CallerFrom) to the Backend,
// which records it in the audit log. Guests reach the host only through
// their virtio-serial agent channel, never through these listeners.
//
// Shutdown stops accepting, ends endless streams (events, followed output),
// waits for execs and transfers in flight until its context ends, then
// cuts the rest.
package apiserver
