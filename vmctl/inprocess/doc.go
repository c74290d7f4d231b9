// Package inprocess is the sandbox service run inside the calling process,
// reached through vmctl/client over an in-memory socketpair listener: the
// same daemon.Daemon and API server that `agentbox serve` runs, so a front
// without a daemon (`agentbox run --local`, an MCP server's local mode)
// has one code path for both.
//
// Its state is kept apart per run, one directory per run under
// STATE/local/RUN-ID, flock'ed while the run's process lives (rundir.go).
// Its domains are started with libvirt's autodestroy, so they die with the
// process, even on kill -9 (not when kept). Sweep removes what runs whose
// process is gone left behind; Start sweeps before it starts, and
// `agentbox serve` sweeps too.
package inprocess
