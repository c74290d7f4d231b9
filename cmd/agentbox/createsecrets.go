package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/api"
)

// create's --secret and --secret-host (CreateSandboxRequest.Secrets).
var (
	createSecretFlag = &cli.StringSliceFlag{
		Name:  "secret",
		Usage: "give the sandbox the secret `NAME=@FILE` (repeatable): the guest sees only a placeholder in $NAME; the host's proxy puts FILE's content (one trailing newline dropped) into the headers of HTTPS requests to its --secret-host hosts",
	}
	createSecretHostFlag = &cli.StringSliceFlag{
		Name:  "secret-host",
		Usage: "send secret NAME's value to `NAME=HOST` (repeatable; an exact host name the --allow list allows)",
	}
)

// sandboxSecrets returns create's --secret and --secret-host as the
// request's secrets, in the order of --secret. Values are read from files
// only, so they are never on a command line.
func sandboxSecrets(c *cli.Context) ([]api.SecretSpec, error) {
	var out []api.SecretSpec
	index := map[string]int{}
	for _, kv := range c.StringSlice(createSecretFlag.Name) {
		name, file, ok := strings.Cut(kv, "=@")
		if !ok || name == "" || file == "" {
			return nil, fmt.Errorf("--secret %q: want NAME=@FILE (the value is read from FILE, never given on the command line)", kv)
		}
		if _, dup := index[name]; dup {
			return nil, fmt.Errorf("--secret %s is given twice", name)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--secret %s: %w", name, err)
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		index[name] = len(out)
		out = append(out, api.SecretSpec{Name: name, Value: v})
	}
	for _, kv := range c.StringSlice(createSecretHostFlag.Name) {
		name, host, ok := strings.Cut(kv, "=")
		if !ok || name == "" || host == "" {
			return nil, fmt.Errorf("--secret-host %q: want NAME=HOST, e.g. API_KEY=api.example.com", kv)
		}
		i, known := index[name]
		if !known {
			return nil, fmt.Errorf("--secret-host %s: no --secret %s=@FILE", kv, name)
		}
		out[i].Hosts = append(out[i].Hosts, host)
	}
	return out, nil
}
