package daemon

import (
	"strings"

	"github.com/agentbox/agentbox/vmctl/api"
)

// createArgs are the audit arguments of a create: every setting the
// request carried, by its JSON name (zero values left out), so that a
// refused create is audited with what was asked. A create that succeeds
// overwrites the resolved ones (vCPUs, memory, accelerator, limits,
// network) with what the sandbox got.
func createArgs(req api.CreateSandboxRequest) map[string]any {
	args := map[string]any{"image": req.Image}
	set := func(k string, v any, ok bool) {
		if ok {
			args[k] = v
		}
	}
	set("template", req.Template, req.Template != "")
	set("priority", req.Priority, req.Priority != "")
	set("name", req.Name, req.Name != "")
	set("labels", req.Labels, len(req.Labels) > 0)
	set("vcpus", req.VCPUs, req.VCPUs > 0)
	set("memory_mib", req.MemoryMiB, req.MemoryMiB > 0)
	set("accel", req.Accel, req.Accel != "")
	set("boot_timeout_ms", req.BootTimeoutMs, req.BootTimeoutMs > 0)
	set("warm", true, req.Warm)
	set("env", envKeys(req.Env), len(req.Env) > 0) // the keys only: values may be secrets
	// The secrets' names and hosts, never their values (secrets.go).
	set("secrets", secretArgs(req.Secrets), len(req.Secrets) > 0)
	if n := req.Network; n != nil && (n.Mode != "" || len(n.Allow) > 0) {
		args["network"] = n.Mode // as networkArg writes a policy: "allowlist[example.com host:5432]"
		if len(n.Allow) > 0 {
			args["network"] = n.Mode + "[" + strings.Join(n.Allow, " ") + "]"
		}
	}
	for k, v := range map[string]int64{
		"disk_mib": req.DiskMiB, "cpu_quota_percent": int64(req.CPUQuotaPercent), "io_bps": req.IOBps, "iops": req.IOPS,
		"io_weight": int64(req.IOWeight), "pids": req.Pids, "net_bps": req.NetBps,
	} {
		set(k, v, v > 0)
	}
	limitArgs(args, req.Limits)
	return args
}

// limitArgs adds the lifetime limits lim sets to args.
func limitArgs(args map[string]any, lim api.Limits) {
	for k, v := range map[string]int64{
		"ttl_seconds": lim.TTLSeconds, "idle_timeout_seconds": lim.IdleTimeoutSeconds, "exec_timeout_ms": lim.ExecTimeoutMs,
		"max_execs": int64(lim.MaxExecs), "paused_ttl_seconds": lim.PausedTTLSeconds,
	} {
		if v > 0 {
			args[k] = v
		}
	}
	if lim.IdleAction != "" {
		args["idle_action"] = lim.IdleAction
	}
	if lim.TTLAction != "" {
		args["ttl_action"] = lim.TTLAction
	}
}

// envKeys are the keys of "KEY=VALUE" entries: what the audit keeps of
// an environment (values may be secrets).
func envKeys(env []string) []string {
	keys := make([]string, len(env))
	for i, e := range env {
		keys[i], _, _ = strings.Cut(e, "=")
	}
	return keys
}
