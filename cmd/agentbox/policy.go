package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/policy"
)

// servePolicyFlags are serve's policy plugin flags (docs/policy.md).
func servePolicyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "policy", Usage: "ask the policy plugin started as `\"CMD ARGS\"` (split as a shell would, without expansions) before every create, command, file read or write, port forward and network policy, e.g. \"agentbox-policy --rules /etc/agentbox/policy.toml\" (docs/policy.md)"},
		&cli.DurationFlag{Name: "policy-timeout", Value: policy.DefaultTimeout, Usage: "the policy plugin's deadline per decision: a plugin that has not answered by then is restarted and the call refused (503 policy_unavailable)"},
	}
}

// servePolicy starts the plugin of --policy (nil, and a no-op close,
// without one): a plugin that cannot start or fails its handshake stops
// serve before it listens.
func servePolicy(c *cli.Context, logger *slog.Logger) (daemon.Policy, func(), error) {
	cmdline := c.String("policy")
	if cmdline == "" {
		if c.IsSet("policy-timeout") {
			return nil, nil, fmt.Errorf("--policy-timeout needs --policy")
		}
		return nil, func() {}, nil
	}
	if c.Duration("policy-timeout") <= 0 {
		return nil, nil, fmt.Errorf("--policy-timeout %s: give a positive duration, e.g. 2s", c.Duration("policy-timeout"))
	}
	argv, err := policy.ParseCommand(cmdline)
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	pc, err := policy.NewClient(argv, policy.Options{Timeout: c.Duration("policy-timeout"), Logger: logger.With("component", "policy")})
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	start := time.Now()
	if err := pc.Start(); err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	logger.Info("policy plugin started", "command", argv, "took", time.Since(start), "timeout", c.Duration("policy-timeout"))
	return pc, func() { pc.Close() }, nil
}
