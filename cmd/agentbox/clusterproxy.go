package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
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

// clusterPeers reads serve --cluster's peer flags: the token of
// --cluster-token-file (and the file's name, for errors), and the TLS
// config for other nodes' https:// addresses from --cluster-ca and, with
// --tls-client-ca, the node's own --tls-cert to present (nil: the
// system's roots, no certificate).
func clusterPeers(c *cli.Context) (token, file string, tlsCfg *tls.Config, err error) {
	f := c.String("cluster-token-file")
	if f == "" {
		return "", "", nil, errors.New("--cluster needs --cluster-token-file: the nodes forward requests to each other with its token (give every node the same file, e.g. made with `openssl rand -hex 32`)")
	}
	tok, err := os.ReadFile(f)
	if err != nil {
		return "", "", nil, fmt.Errorf("--cluster-token-file: %w", err)
	}
	if ca := c.String("cluster-ca"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return "", "", nil, fmt.Errorf("--cluster-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return "", "", nil, fmt.Errorf("--cluster-ca %s: no PEM certificate in it", ca)
		}
		tlsCfg = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	if c.String("tls-client-ca") != "" && c.String("tls-cert") != "" {
		cert, err := tls.LoadX509KeyPair(c.String("tls-cert"), c.String("tls-key"))
		if err != nil {
			return "", "", nil, fmt.Errorf("TLS key pair: %w", err)
		}
		if tlsCfg == nil {
			tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tlsCfg.Certificates = []tls.Certificate{cert}
	}
	return string(tok), f, tlsCfg, nil
}
