// Package host is the one assembly of the agentbox service: the libvirt
// connection, the sweep of killed in-process runs, the sandboxes'
// network and egress proxies (with the secrets interception), the policy
// plugin, the daemon (vmctl/daemon), the cluster membership and routing,
// the REST API server, MCP and the E2B front, and their listeners, all on
// one vmctl/revert list. `agentbox serve` starts it with Start and ends
// it with Wait and Shutdown; `agentbox run --local` and `agentbox mcp
// --local` start a local host (Options.Local) and reach it through
// Host.Client, vmctl/client over an in-memory socketpair listener
// (Listener), so a front without a daemon has the daemon's code path.
// cmd/agentbox keeps the flags (turned into Options) and the printing.
//
// A local host's state is kept apart per run, one directory per run
// under STATE/local/RUN-ID, flock'ed while the run's process lives
// (rundir.go). Its domains are started with libvirt's autodestroy, so
// they die with the process, even on kill -9 (not when kept). Sweep
// removes what runs whose process is gone left behind; both kinds of
// host sweep when they start. DESIGN.md says what is started in which
// order and how serve and a local host differ.
package host
