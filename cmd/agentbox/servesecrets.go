package main

import (
	"crypto/x509"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// secretsUpstreamCAFlag is serve's --secrets-upstream-ca (servenet.go's
// list): more CAs the intercepting proxy trusts for upstream servers.
var secretsUpstreamCAFlag = &cli.StringFlag{
	Name:  "secrets-upstream-ca",
	Usage: "PEM `FILE` of CA certificates the egress proxy trusts, besides the host's roots, for the servers of hosts a sandbox's secrets are bound to (an internal API, tests)",
}

// secretsRoots returns the pool the intercepting proxy verifies upstream
// servers with: the host's roots plus --secrets-upstream-ca; nil (the
// host's roots) without the flag.
func secretsRoots(c *cli.Context) (*x509.CertPool, error) {
	f := c.String(secretsUpstreamCAFlag.Name)
	if f == "" {
		return nil, nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", secretsUpstreamCAFlag.Name, err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--%s %s: no PEM certificate in it", secretsUpstreamCAFlag.Name, f)
	}
	return pool, nil
}
