// Package api is the wire package of agentbox's REST API: the request and
// response types (types.go, snapshots.go, warm.go, network.go,
// resources.go), the stable error codes and the error model with the one
// table that maps errdefs categories and reasons to HTTP statuses and codes
// (errors.go: ErrorFrom), request validation (validate.go), the caller of
// a request (caller.go) and the OpenAPI document (openapi.yaml, OpenAPI).
// It depends on the standard library and vmctl/errdefs only (deps_test.go
// checks), so the server (vmctl/apiserver), the Go client (vmctl/client),
// other fronts and SDK generators can all import it.
package api
