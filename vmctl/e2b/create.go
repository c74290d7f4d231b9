package e2b

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/vmctl/api"
)

// allTraffic is E2B's "all destinations" entry of allowOut and denyOut
// (the SDK's ALL_TRAFFIC).
const allTraffic = "0.0.0.0/0"

// notSupported is the 400 of a create option agentbox cannot honour.
func notSupported(format string, args ...any) error {
	return api.Errorf(http.StatusBadRequest, api.CodeInvalidArgument, "%s is not supported by agentbox", fmt.Sprintf(format, args...))
}

// createRequest translates an E2B create into the sandbox service's
// request (without its template: applyTemplate sets it) and the
// timeout: metadata become labels, envVars the sandbox's default env,
// timeout its TTL, autoPause its TTL action, allow_internet_access and
// network its network policy. Options agentbox cannot honour are 400
// errors naming them, before anything is made.
func createRequest(in newSandbox) (api.CreateSandboxRequest, time.Duration, error) {
	var req api.CreateSandboxRequest
	switch {
	case len(in.MCP) > 0:
		return req, 0, notSupported("mcp (E2B's MCP gateway template)")
	case in.IAM != nil && len(in.IAM.Tokens) > 0:
		return req, 0, notSupported("iam (workload identity tokens)")
	case len(in.VolumeMounts) > 0:
		return req, 0, notSupported("volumeMounts")
	case in.AutoResume != nil && in.AutoResume.Enabled:
		return req, 0, notSupported("autoResume (traffic resuming a paused sandbox): resume it with Sandbox.connect")
	}
	timeout := DefaultTimeout
	if in.Timeout != nil {
		if *in.Timeout < 1 || *in.Timeout > api.MaxTimeoutSeconds {
			return req, 0, api.Invalidf("timeout %d: want 1 to %d seconds", *in.Timeout, api.MaxTimeoutSeconds)
		}
		timeout = time.Duration(*in.Timeout) * time.Second
	}
	req.Limits.TTLSeconds = int64(timeout / time.Second)
	if in.AutoPause != nil && *in.AutoPause {
		// A paused sandbox with its memory is one paused to disk (QEMU
		// ends, nothing held on the host); without it, one stopped (its
		// disk kept: connect boots it again), as E2B's filesystem-only
		// snapshot cold-boots.
		req.Limits.TTLAction = api.IdleActionPauseToDisk
		if in.AutoPauseMemory != nil && !*in.AutoPauseMemory {
			req.Limits.TTLAction = api.IdleActionStop
		}
	}
	if len(in.Metadata) > 0 {
		req.Labels = make(map[string]string, len(in.Metadata))
		for k, v := range in.Metadata {
			if !api.ValidLabelKey(k) {
				return req, 0, api.Invalidf("metadata key %s: agentbox keeps metadata as labels, whose keys are 1 to 63 letters, digits, '_', '.', '/', '-', starting with a letter or digit", api.QuoteShort(k))
			}
			req.Labels[k] = v
		}
	}
	for _, k := range slices.Sorted(maps.Keys(in.EnvVars)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return req, 0, api.Invalidf("envVars key %s: a variable name must be non-empty without '=' or NUL", api.QuoteShort(k))
		}
		req.Env = append(req.Env, k+"="+in.EnvVars[k])
	}
	net, err := networkPolicy(in.AllowInternetAccess, in.Network)
	if err != nil {
		return req, 0, err
	}
	req.Network = net
	return req, timeout, nil
}

// networkPolicy maps E2B's egress options to agentbox's network policy:
//
//   - allowOut listing 0.0.0.0/0: mode open;
//   - any other allowOut: mode allowlist of those entries (a name reaches
//     TCP 80 and 443; an address needs a port, e.g. 1.1.1.1:53, as
//     agentbox's allowlist takes CIDR:PORT);
//   - allow_internet_access false or denyOut 0.0.0.0/0 (without
//     allowOut): mode none;
//   - allow_internet_access true: mode open;
//   - none of them: nil, the template's own policy (its manifest's, most
//     often none; E2B's own default is open).
//
// denyOut of single destinations, rules and egressProxy are not supported
// (agentbox's policies are allowlists); allowPublicTraffic,
// maskRequestHost and httpsPorts concern E2B's public sandbox URLs, which
// agentbox does not have, and are ignored.
func networkPolicy(allowInternet *bool, n *networkConfig) (*api.NetworkPolicy, error) {
	var allow, deny []string
	if n != nil {
		if len(n.Rules) > 0 {
			return nil, notSupported("network.rules (request transforms)")
		}
		if len(n.EgressProxy) > 0 {
			return nil, notSupported("network.egressProxy")
		}
		allow, deny = n.AllowOut, n.DenyOut
	}
	denyAll := allowInternet != nil && !*allowInternet
	for _, d := range deny {
		if d != allTraffic {
			return nil, notSupported("network.denyOut %s (agentbox's network policy is an allowlist: deny all with %s and list what is allowed in allowOut)", api.QuoteShort(d), allTraffic)
		}
		denyAll = true
	}
	switch {
	case slices.Contains(allow, allTraffic):
		return &api.NetworkPolicy{Mode: "open"}, nil
	case len(allow) > 0:
		return &api.NetworkPolicy{Mode: "allowlist", Allow: slices.Clone(allow)}, nil
	case denyAll:
		return &api.NetworkPolicy{Mode: "none"}, nil
	case allowInternet != nil && *allowInternet:
		return &api.NetworkPolicy{Mode: "open"}, nil
	}
	return nil, nil
}
