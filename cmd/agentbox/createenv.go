package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
)

// createEnvFlag is create's --env: the sandbox's default exec environment
// (CreateSandboxRequest.Env, E2B's envVars). `run` has no such flag: its
// --env is the command's.
var createEnvFlag = &cli.StringSliceFlag{
	Name:    "env",
	Aliases: []string{"e"},
	Usage:   "set `K=V` in the environment of every command run in the sandbox (repeatable; an exec's own --env overrides it key by key; use one spelling, --env or -e)",
}

// sandboxEnv returns create's --env entries, checked as the API checks
// them (KEY=VALUE, a non-empty key, no NUL; at most api.MaxEnv).
func sandboxEnv(c *cli.Context) ([]string, error) {
	env := c.StringSlice("env")
	if len(env) == 0 {
		return nil, nil
	}
	for _, kv := range env {
		if err := api.CheckEnv([]string{kv}); err != nil {
			return nil, fmt.Errorf("--env %q: want KEY=VALUE with a non-empty KEY", kv)
		}
	}
	if len(env) > api.MaxEnv {
		return nil, fmt.Errorf("--env given %d times: a sandbox's environment holds at most %d entries", len(env), api.MaxEnv)
	}
	return env, nil
}
