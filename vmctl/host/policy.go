package host

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/agentbox/agentbox/vmctl/daemon"
	"github.com/agentbox/agentbox/vmctl/policy"
)

// startPolicy starts the plugin of o (nil, and a nil close, without a
// Command): a plugin that cannot start or fails its handshake stops
// Start before the API is served.
func startPolicy(o PolicyOptions, logger *slog.Logger) (daemon.Policy, func(), error) {
	if o.Command == "" {
		return nil, nil, nil
	}
	if o.Timeout <= 0 {
		return nil, nil, fmt.Errorf("--policy-timeout %s: give a positive duration, e.g. 2s", o.Timeout)
	}
	argv, err := policy.ParseCommand(o.Command)
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	pc, err := policy.NewClient(argv, policy.Options{Timeout: o.Timeout, Logger: logger.With("component", "policy")})
	if err != nil {
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	start := time.Now()
	if err := pc.Start(); err != nil {
		pc.Close()
		return nil, nil, fmt.Errorf("--policy: %w", err)
	}
	logger.Info("policy plugin started", "command", argv, "took", time.Since(start), "timeout", o.Timeout)
	return pc, func() { pc.Close() }, nil
}
