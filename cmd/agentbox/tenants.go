package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/apiserver"
	"github.com/agentbox/agentbox/vmctl/tenant"
)

// priorityFlag is create's --priority (api.CreateSandboxRequest.Priority).
var priorityFlag = &cli.StringFlag{Name: "priority", Usage: "priority class `low|normal|high` (default normal); a tenant may ask at most its max_priority (a cluster serves higher classes first)"}

// serveTenantFlags are `serve`'s tenant flags.
func serveTenantFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tenants", Usage: "tenants `FILE` (TOML: [[tenant]] name, token_sha256, max_sandboxes, max_vcpus, max_memory_mib, max_priority, max_snapshots, max_snapshot_mib, max_port_forwards, host_ports, share_templates; see docs/tenants.md): their tokens are accepted on TCP, the E2B API and /mcp, each sees only its own sandboxes within its quotas; the --token-file token stays the admin's"},
	}
}

// serveTenants loads --tenants (nil without it). Errors: the file does
// not parse (the message says what to fix), or a tenant's token is the
// admin's (--token-file).
func serveTenants(c *cli.Context, adminToken string) (*tenant.Registry, error) {
	path := c.String("tenants")
	if path == "" {
		return nil, nil
	}
	reg, err := tenant.Load(path)
	if err != nil {
		return nil, err
	}
	if tok := strings.TrimSpace(adminToken); tok != "" {
		if t, ok := reg.Lookup(tok); ok {
			return nil, fmt.Errorf("tenants file %s: tenant %q has the token of --token-file, which is the admin's: give the tenant its own token", path, t.Name)
		}
	}
	return reg, nil
}

func tenantCommand() *cli.Command {
	return &cli.Command{
		Name:  "tenant",
		Usage: "tenants of `serve --tenants` (see docs/tenants.md)",
		Subcommands: []*cli.Command{{
			Name:      "hash",
			Usage:     "print the token_sha256 of a tenant's token, read from stdin (e.g. < TOKENFILE)",
			ArgsUsage: " ",
			Description: "Reads one token from stdin (surrounding white space, a file's newline, is ignored) and prints\n" +
				"its SHA-256 in hex, the token_sha256 of the tenant's [[tenant]] in the tenants file. The daemon\n" +
				"keeps only this digest. Make a token with e.g. `openssl rand -hex 32 > a.token`.",
			OnUsageError: usageError,
			Action: func(c *cli.Context) error {
				if c.Args().Present() {
					return errors.New("tenant hash reads the token from stdin, not from an argument (which other users could see): agentbox tenant hash < TOKENFILE")
				}
				tok, err := readToken(c.App.Reader)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, tenant.HashToken(tok))
				return nil
			},
		}},
	}
}

// readToken reads one token from r: white space around it removed, at
// least apiserver.MinTokenBytes long, one word.
func readToken(r io.Reader) (string, error) {
	b, err := io.ReadAll(io.LimitReader(bufio.NewReader(r), 64<<10))
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", errors.New("no token on stdin: agentbox tenant hash < TOKENFILE (make one with `openssl rand -hex 32 > TOKENFILE`)")
	case strings.ContainsAny(tok, " \t\r\n"):
		return "", errors.New("the token contains white space: use one word, e.g. the output of `openssl rand -hex 32`")
	case len(tok) < apiserver.MinTokenBytes:
		return "", fmt.Errorf("the token is %d bytes long: use at least %d random bytes, e.g. the output of `openssl rand -hex 32`", len(tok), apiserver.MinTokenBytes)
	}
	return tok, nil
}
