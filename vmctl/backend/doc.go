// Package backend is the service contract: the one interface every front
// serves — the REST server (vmctl/apiserver), and through it the E2B front
// (vmctl/e2b, vmctl/envd), MCP (vmctl/mcp), the cluster proxy
// (vmctl/clusterproxy) and the in-process service of a local host (vmctl/host).
// vmctl/daemon implements it; vmctl/backend/backendtest is the fake the
// fronts' tests run against.
//
// Backend is what every daemon does (sandboxes, exec, detached processes,
// files, history, console, audit, events). What only some do is a small
// optional interface beside it (LifecycleBackend, SnapshotBackend,
// ForkBackend, TimeoutBackend, WarmBackend, TemplateBackend, PortBackend,
// WatchBackend, ProcessTerminalBackend, NodeBackend): a front finds it by
// a type assertion and answers its routes 501 not_implemented when the
// Backend lacks it. ExecControl is a running interactive command's
// controls; ProcessAttachment connects a client to a detached process.
//
// The methods take values the front has checked already (references,
// paths, validated requests) and the caller in ctx (api.CallerFrom); they
// return the errors of the layers below wrapped with %w (errdefs
// categories and reasons), which a front maps through api.ErrorFrom. The
// package depends on vmctl/api and vmctl/audit only: the daemon imports
// it, and never a front.
package backend
