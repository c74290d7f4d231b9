// Package e2b is agentbox's E2B-compatible front: the control plane of
// E2B's REST API as the unmodified `e2b` SDK calls it (create, connect,
// get, list, kill, timeout, pause, metrics under /v2/sandboxes and
// /sandboxes), its error shape ({"code": HTTP status, "message": ...}),
// X-API-KEY authentication, per-sandbox envd access tokens, and the
// routing of data-plane requests (those carrying E2b-Sandbox-Id) to the
// envd handler (vmctl/envd) on the same listener.
//
// Every call is translated to the one sandbox service through
// vmctl/client (in the daemon: client.NewHandler over the API's own
// handler), with the caller "e2b": admission, audit, quotas and network
// policy apply, and a sandbox made here is an ordinary agentbox sandbox
// (and the reverse). Errors come from api.ErrorFrom's one table; the
// E2B code is the HTTP status it gives, the agentbox code rides along as
// error_code. The wire shapes are those of the SDK 2.51.0's generated
// OpenAPI types; docs/e2b.md lists what maps to what and what is not
// supported.
package e2b
