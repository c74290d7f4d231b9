package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/host"
	"github.com/agentbox/agentbox/vmctl/policy"
)

// servePolicyFlags are serve's policy plugin flags (docs/policy.md).
func servePolicyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "policy", Usage: "ask the policy plugin started as `\"CMD ARGS\"` (split as a shell would, without expansions) before every create, command, file read or write, port forward and network policy, e.g. \"agentbox-policy --rules /etc/agentbox/policy.toml\" (docs/policy.md)"},
		&cli.DurationFlag{Name: "policy-timeout", Value: policy.DefaultTimeout, Usage: "the policy plugin's deadline per decision: a plugin that has not answered by then is restarted and the call refused (503 policy_unavailable)"},
	}
}

// servePolicyOptions reads --policy and --policy-timeout (vmctl/host
// starts the plugin).
func servePolicyOptions(c *cli.Context) (host.PolicyOptions, error) {
	if c.String("policy") == "" && c.IsSet("policy-timeout") {
		return host.PolicyOptions{}, fmt.Errorf("--policy-timeout needs --policy")
	}
	return host.PolicyOptions{Command: c.String("policy"), Timeout: c.Duration("policy-timeout")}, nil
}
