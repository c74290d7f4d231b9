package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/agentbox/agentbox/vmctl/cluster"
	"github.com/agentbox/agentbox/vmctl/clusterproxy"
)

// serveClusterProxyFlags are serve's flags of the routing between cluster
// nodes (vmctl/clusterproxy; docs/cluster.md, "Routing"), meaningful with
// --cluster only.
func serveClusterProxyFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "cluster-token-file", Usage: "`FILE` holding the token the cluster's nodes send each other (the same file on every node; needed with --cluster)", EnvVars: []string{"AGENTBOX_CLUSTER_TOKEN_FILE"}},
		&cli.StringFlag{Name: "cluster-ca", Usage: "CA `FILE` (PEM) that signed the other nodes' TLS certificates, for --advertise https:// URLs (default: the system's roots)"},
	}
}

// clusterRouter builds the apiserver.Router of serve --cluster from
// --cluster-token-file and --cluster-ca: dir and nodes are the cluster's
// (vmctl/cluster); tenantOf and withTenant the tenant hooks
// (clusterproxy.Config; nil without --tenants). With --tls-client-ca,
// the node presents its own --tls-cert to the others. It returns the
// Proxy, which the caller closes, and the cluster token, which the
// daemon's keyring takes as the peers' (auth.Config.Peer).
func clusterRouter(c *cli.Context, dir cluster.Directory, nodes cluster.Nodes, cfg clusterproxy.Config, logger *slog.Logger) (*clusterproxy.Proxy, string, error) {
	f := c.String("cluster-token-file")
	if f == "" {
		return nil, "", errors.New("--cluster needs --cluster-token-file: the nodes forward requests to each other with its token (give every node the same file, e.g. made with `openssl rand -hex 32`)")
	}
	tok, err := os.ReadFile(f)
	if err != nil {
		return nil, "", fmt.Errorf("--cluster-token-file: %w", err)
	}
	cfg.Directory, cfg.Nodes, cfg.Token, cfg.Logger = dir, nodes, string(tok), logger
	if ca := c.String("cluster-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, "", fmt.Errorf("--cluster-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, "", fmt.Errorf("--cluster-ca %s: no PEM certificate in it", ca)
		}
		cfg.TLS = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if c.String("tls-client-ca") != "" && c.String("tls-cert") != "" {
		cert, err := tls.LoadX509KeyPair(c.String("tls-cert"), c.String("tls-key"))
		if err != nil {
			return nil, "", fmt.Errorf("TLS key pair: %w", err)
		}
		if cfg.TLS == nil {
			cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		cfg.TLS.Certificates = []tls.Certificate{cert}
	}
	p, err := clusterproxy.New(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("--cluster-token-file %s: %w", f, err)
	}
	return p, cfg.Token, nil
}
