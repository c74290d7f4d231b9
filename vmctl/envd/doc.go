// Package envd is agentbox's host-side implementation of E2B's envd
// interface: the data plane the `e2b` SDK talks to inside each sandbox
// (the process.Process and filesystem.Filesystem services over the
// Connect protocol, /files upload and download, /health). E2B runs envd
// in the guest; agentbox serves the same interface on the host and
// translates every call to the one sandbox service through vmctl/client,
// so an E2B caller goes through the same admission, audit, exec
// accounting and error mapping as the REST API.
//
// The E2B front (vmctl/e2b) authenticates a request, checks the
// sandbox's access token, and passes the sandbox's ID in the request's
// context (WithSandbox) before calling the Handler.
package envd
